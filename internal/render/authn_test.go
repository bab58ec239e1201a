package render_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/webhook"
)

var trust = render.HubTrust{
	Issuer:          "https://kubernetes.default.svc",
	DiscoveryURL:    "https://crucible-ext.hub.example.com/.well-known/openid-configuration",
	Audience:        "wharf",
	AllowedSubjects: []string{"system:serviceaccount:crucible:crucible-controller"},
	UsernamePrefix:  "hub:",
}

// The webhook file render writes is one the webhook accepts, with the trust
// it was given.
func TestWebhookConfigParses(t *testing.T) {
	data, err := render.WebhookConfig(trust)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := webhook.ParseConfig(data)
	if err != nil {
		t.Fatalf("ParseConfig(%s): %v", data, err)
	}
	if len(cfg.Providers) != 1 {
		t.Fatalf("providers = %d", len(cfg.Providers))
	}
	p := cfg.Providers[0]
	if diff := cmp.Diff(trust.AllowedSubjects, p.AllowedSubjects); diff != "" {
		t.Errorf("allowedSubjects (-want +got):\n%s", diff)
	}
	if p.JWT.Issuer.URL != trust.Issuer || p.JWT.Issuer.DiscoveryURL != trust.DiscoveryURL ||
		!cmp.Equal(p.JWT.Issuer.Audiences, []string{"wharf"}) || *p.JWT.ClaimMappings.Username.Prefix != "hub:" {
		t.Errorf("provider = %+v", p.JWT)
	}
}

// The AuthenticationConfiguration render writes passes kube-apiserver's own
// validation (for a spoke whose issuer differs) and admits exactly the
// allowed subjects.
func TestAuthenticationConfigurationValidates(t *testing.T) {
	for _, subjects := range [][]string{trust.AllowedSubjects, {"a", "b"}, nil} {
		tr := trust
		tr.AllowedSubjects = subjects
		data, err := render.AuthenticationConfiguration(tr)
		if err != nil {
			t.Fatal(err)
		}
		var v1 apiserverv1.AuthenticationConfiguration
		if err := yaml.UnmarshalStrict(data, &v1); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		scheme := runtime.NewScheme()
		apiserverinstall.Install(scheme)
		var internal apiserver.AuthenticationConfiguration
		if err := scheme.Convert(&v1, &internal, nil); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateAuthenticationConfiguration(authenticationcel.NewDefaultCompiler(), &internal, []string{"https://wharf.spoke.example"}); len(errs) > 0 {
			t.Errorf("subjects %v: %v\n%s", subjects, errs.ToAggregate(), data)
		}
		if diff := cmp.Diff([]string{"!user.username.startsWith('system:')", "user.groups.all(g, !g.startsWith('system:'))"}, userRuleExpressions(v1.JWT[0])); diff != "" {
			t.Errorf("userValidationRules (-want +got):\n%s", diff)
		}
		rules := v1.JWT[0].ClaimValidationRules
		if len(rules) != 1 {
			t.Fatalf("rules = %+v, want one", rules)
		}
		want := map[int]string{1: `claims.sub == "system:serviceaccount:crucible:crucible-controller"`, 2: `claims.sub == "a" || claims.sub == "b"`, 0: "false"}[len(subjects)]
		if rules[0].Expression != want || !strings.Contains(string(data), "kind: AuthenticationConfiguration") {
			t.Errorf("rule = %q, want %q", rules[0].Expression, want)
		}
	}
}

func userRuleExpressions(jwt apiserverv1.JWTAuthenticator) []string {
	var exprs []string
	for _, r := range jwt.UserValidationRules {
		exprs = append(exprs, r.Expression)
	}
	return exprs
}

// The userValidationRules, compiled and run by kube-apiserver's own CEL
// code, refuse exactly the users with a system: name or group.
func TestUserValidationRulesRefuseSystemNames(t *testing.T) {
	data, err := render.AuthenticationConfiguration(trust)
	if err != nil {
		t.Fatal(err)
	}
	var v1 apiserverv1.AuthenticationConfiguration
	if err := yaml.UnmarshalStrict(data, &v1); err != nil {
		t.Fatal(err)
	}
	compiler := authenticationcel.NewDefaultCompiler()
	var programs []authenticationcel.CompilationResult
	for _, r := range v1.JWT[0].UserValidationRules {
		res, err := compiler.CompileUserExpression(&authenticationcel.UserValidationCondition{Expression: r.Expression, Message: r.Message})
		if err != nil {
			t.Fatalf("compile %q: %v", r.Expression, err)
		}
		programs = append(programs, res)
	}
	mapper := authenticationcel.NewUserMapper(programs)
	tests := []struct {
		username string
		groups   []string
		want     bool
	}{
		{"hub:system:serviceaccount:crucible:crucible-controller", nil, true},
		{"hub:alice", []string{"hub:team", "developers"}, true},
		{"system:serviceaccount:kube-system:default", nil, false},
		{"system:admin", nil, false},
		{"hub:alice", []string{"developers", "system:masters"}, false},
		{"hub:alice", []string{"system:nodes"}, false},
		{"System:admin", nil, true}, // Kubernetes' reservation is case-sensitive
	}
	for _, tt := range tests {
		user := types.DefaultTypeAdapter.NativeToValue(map[string]any{
			"username": tt.username, "uid": "", "groups": append([]string{}, tt.groups...), "extra": map[string][]string{},
		}).(traits.Mapper)
		results, err := mapper.EvalUser(t.Context(), user)
		if err != nil {
			t.Fatalf("%s %v: %v", tt.username, tt.groups, err)
		}
		got := true
		for _, r := range results {
			got = got && r.EvalResult == types.True
		}
		if got != tt.want {
			t.Errorf("user %q groups %v: accepted = %v, want %v", tt.username, tt.groups, got, tt.want)
		}
	}
}

// A prefix that lets hub subjects pass for the spoke's own names is refused,
// with an error naming the setting.
func TestAuthenticationConfigurationRefusesPrefix(t *testing.T) {
	for _, prefix := range []string{"", " ", "system:", "system:hub:", "system:serviceaccount:"} {
		tr := trust
		tr.UsernamePrefix = prefix
		data, err := render.AuthenticationConfiguration(tr)
		if !errors.Is(err, render.ErrUsernamePrefix) || !strings.Contains(err.Error(), "username prefix") {
			t.Errorf("prefix %q: %v, %s; want ErrUsernamePrefix", prefix, err, data)
		}
	}
	for _, prefix := range []string{"hub:", "hub-", "System:"} {
		tr := trust
		tr.UsernamePrefix = prefix
		if _, err := render.AuthenticationConfiguration(tr); err != nil {
			t.Errorf("prefix %q: %v", prefix, err)
		}
	}
}
