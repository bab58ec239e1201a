package webhook

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apiserver/pkg/apis/apiserver"
)

const validConfig = `
providers:
- name: hub
  allowedSubjects: ["system:serviceaccount:crucible:crucible-controller"]
  issuer:
    url: https://kubernetes.default.svc
    discoveryURL: https://127.0.0.1:8443/.well-known/openid-configuration
    audiences: [wharf]
  claimValidationRules:
  - claim: kubernetes.io
    requiredValue: x
  claimMappings:
    username: {claim: sub, prefix: "hub:"}
    groups: {expression: "['crucible:controllers']"}
    uid: {claim: jti}
    extra:
    - {key: crucible.dev/hub, valueExpression: "'hub'"}
  userValidationRules:
  - expression: "!user.username.startsWith('system:')"
    message: no system users
`

func TestParseConfigValid(t *testing.T) {
	got, err := ParseConfig([]byte(validConfig))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	prefix := "hub:"
	want := &Config{
		JWKSMinRefreshInterval: DefaultJWKSMinRefreshInterval,
		Providers: []ProviderConfig{{
			Name:            "hub",
			AllowedSubjects: []string{controllerSub},
			JWT: apiserver.JWTAuthenticator{
				Issuer: apiserver.Issuer{
					URL:          hubIssuer,
					DiscoveryURL: "https://127.0.0.1:8443/.well-known/openid-configuration",
					Audiences:    []string{"wharf"},
				},
				ClaimValidationRules: []apiserver.ClaimValidationRule{{Claim: "kubernetes.io", RequiredValue: "x"}},
				ClaimMappings: apiserver.ClaimMappings{
					Username: apiserver.PrefixedClaimOrExpression{Claim: "sub", Prefix: &prefix},
					Groups:   apiserver.PrefixedClaimOrExpression{Expression: "['crucible:controllers']"},
					UID:      apiserver.ClaimOrExpression{Claim: "jti"},
					Extra:    []apiserver.ExtraMapping{{Key: "crucible.dev/hub", ValueExpression: "'hub'"}},
				},
				UserValidationRules: []apiserver.UserValidationRule{{Expression: "!user.username.startsWith('system:')", Message: "no system users"}},
			},
			UnknownKeyIDGrace: DefaultUnknownKeyIDGrace,
			MaxKeyAge:         DefaultMaxKeyAge,
		}},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(Config{})); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

func TestParseConfigInterval(t *testing.T) {
	got, err := ParseConfig([]byte("jwksMinRefreshInterval: 1m30s\n" + validConfig))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if got.JWKSMinRefreshInterval != 90*time.Second {
		t.Errorf("interval = %v, want 1m30s", got.JWKSMinRefreshInterval)
	}
}

// provider is a valid provider entry; tests replace one line of it.
const providerEntry = `- name: hub
  allowedSubjects: [a]
  issuer:
    url: https://kubernetes.default.svc
    discoveryURL: https://mirror.example/.well-known/openid-configuration
    audiences: [wharf]
  claimMappings:
    username: {claim: sub, prefix: "hub:"}
`

// edit replaces old with new in the provider entry.
func edit(old, new string) string {
	if !strings.Contains(providerEntry, old) {
		panic("edit: " + old + " not in providerEntry")
	}
	return "providers:\n" + strings.Replace(providerEntry, old, new, 1)
}

func TestParseConfigGrace(t *testing.T) {
	for in, want := range map[string]time.Duration{"0s": 0, "90s": 90 * time.Second, "1h": time.Hour} {
		got, err := ParseConfig([]byte(edit("name: hub", "name: hub\n  unknownKeyIDGrace: "+in)))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if g := got.Providers[0].UnknownKeyIDGrace; g != want {
			t.Errorf("unknownKeyIDGrace %s = %v, want %v", in, g, want)
		}
	}
}

func TestParseConfigMaxKeyAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"0s": 0, "30s": 30 * time.Second, "168h": 7 * 24 * time.Hour} {
		got, err := ParseConfig([]byte(edit("name: hub", "name: hub\n  maxKeyAge: "+in)))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if g := got.Providers[0].MaxKeyAge; g != want {
			t.Errorf("maxKeyAge %s = %v, want %v", in, g, want)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // each a substring of the error
	}{
		{"too large", strings.Repeat("#", MaxConfigBytes+1), []string{"larger than 1048576 bytes"}},
		{"empty", " \n", []string{"empty file"}},
		{"YAML syntax", "providers: [", []string{"yaml: line 1"}},
		{"not a mapping", "- a\n- b", []string{"cannot unmarshal array"}},
		{"duplicate key", "providers: []\nproviders: []", []string{`key "providers" already set`}},
		{"unknown top-level field", "provider: []\n" + "providers:\n" + providerEntry, []string{`unknown field "provider"`}},
		{"unknown nested field", edit("audiences: [wharf]", "audiences: [wharf]\n    audience: wharf"), []string{`unknown field "providers[0].issuer.audience"`}},
		{"field names are case-sensitive", edit("name: hub", "Name: hub"), []string{`unknown field "providers[0].Name"`, "providers[0].name: Required value"}},
		{"no providers", "jwksMinRefreshInterval: 10s", []string{"providers: Required value: at least one provider is required"}},
		{"too many providers", "providers:" + strings.Repeat("\n- {}", 65), []string{"providers: Too many: 65: must have at most 64 items"}},
		{"interval not a duration", "jwksMinRefreshInterval: soon\n" + "providers:\n" + providerEntry, []string{`jwksMinRefreshInterval: Invalid value: "soon": must be a duration such as 10s or 1m`}},
		{"interval too short", "jwksMinRefreshInterval: 100ms\n" + "providers:\n" + providerEntry, []string{`jwksMinRefreshInterval: Invalid value: "100ms": must be at least 1s`}},
		{"grace not a duration", edit("name: hub", "name: hub\n  unknownKeyIDGrace: soon"), []string{`providers[0].unknownKeyIDGrace: Invalid value: "soon": must be a duration such as 2m or 0s`}},
		{"grace negative", edit("name: hub", "name: hub\n  unknownKeyIDGrace: -1s"), []string{`providers[0].unknownKeyIDGrace: Invalid value: "-1s": must be between 0s and 1h0m0s`}},
		{"max key age too long", edit("name: hub", "name: hub\n  maxKeyAge: 721h"), []string{`providers[0].maxKeyAge: Invalid value: "721h": must be between 0s and 720h0m0s`}},
		{"grace too long", edit("name: hub", "name: hub\n  unknownKeyIDGrace: 2h"), []string{`providers[0].unknownKeyIDGrace: Invalid value: "2h": must be between 0s and 1h0m0s`}},
		{"name missing", edit("- name: hub\n  allowedSubjects", "- allowedSubjects"), []string{"providers[0].name: Required value: a DNS label"}},
		{"name not a DNS label", edit("name: hub", "name: Hub_1"), []string{`providers[0].name: Invalid value: "Hub_1": a lowercase RFC 1123 label`}},
		{"name repeated", "providers:\n" + providerEntry + strings.Replace(providerEntry, "kubernetes.default.svc", "other.example", 1), []string{`providers[1].name: Duplicate value: "hub"`}},
		{"empty subject", edit("allowedSubjects: [a]", `allowedSubjects: [a, ""]`), []string{"providers[0].allowedSubjects[1]: Required value: an exact sub claim"}},
		{"repeated subject", edit("allowedSubjects: [a]", "allowedSubjects: [a, b, a]"), []string{`providers[0].allowedSubjects[2]: Duplicate value: "a"`}},
		{"issuer url missing", edit("url: https://kubernetes.default.svc", "url: ''"), []string{"providers[0].issuer.url: Required value"}},
		{"issuer url http", edit("url: https://kubernetes.default.svc", "url: http://kubernetes.default.svc"), []string{`providers[0].issuer.url: Invalid value: "http://kubernetes.default.svc": URL scheme must be https`}},
		{"issuer url with a query", edit("url: https://kubernetes.default.svc", "url: https://kubernetes.default.svc?x=1"), []string{"providers[0].issuer.url: Invalid value: \"https://kubernetes.default.svc?x=1\": URL must not contain a query"}},
		{"discovery url http, even on loopback", edit("discoveryURL: https://mirror.example/", "discoveryURL: http://127.0.0.1/"), []string{`providers[0].issuer.discoveryURL: Invalid value: "http://127.0.0.1/.well-known/openid-configuration": URL scheme must be https`}},
		{"discovery url equals issuer", edit("discoveryURL: https://mirror.example/.well-known/openid-configuration", "discoveryURL: https://kubernetes.default.svc/"), []string{"providers[0].issuer.discoveryURL: Invalid value: \"https://kubernetes.default.svc/\": discoveryURL must be different from URL"}},
		{
			"issuer and discovery url repeated",
			"providers:\n" + providerEntry + strings.Replace(providerEntry, "name: hub", "name: hub2", 1),
			[]string{`providers[1].issuer.url: Duplicate value: "https://kubernetes.default.svc"`, `providers[1].issuer.discoveryURL: Duplicate value: "https://mirror.example/.well-known/openid-configuration"`},
		},
		{"audiences missing", edit("audiences: [wharf]", "audiences: []"), []string{"providers[0].issuer.audiences: Required value: at least one issuer.audiences is required"}},
		{"empty audience", edit("audiences: [wharf]", `audiences: [""]`), []string{"providers[0].issuer.audiences[0]: Required value"}},
		{"two audiences without MatchAny", edit("audiences: [wharf]", "audiences: [wharf, dock]"), []string{`providers[0].issuer.audienceMatchPolicy: Invalid value: "": audienceMatchPolicy must be MatchAny for multiple audiences`}},
		{"CA not PEM", edit("audiences: [wharf]", "audiences: [wharf]\n    certificateAuthority: nope"), []string{`providers[0].issuer.certificateAuthority: Invalid value: "<omitted>": data does not contain any valid RSA or ECDSA certificates`}},
		{"egress selector", edit("audiences: [wharf]", "audiences: [wharf]\n    egressSelectorType: cluster"), []string{"providers[0].issuer.egressSelectorType: Forbidden: not supported by crucible's authn webhook"}},
		{"username mapping missing", edit(`username: {claim: sub, prefix: "hub:"}`, "uid: {claim: sub}"), []string{"providers[0].claimMappings.username: Required value: claim or expression is required"}},
		{"username claim without prefix", edit(`username: {claim: sub, prefix: "hub:"}`, "username: {claim: sub}"), []string{"providers[0].claimMappings.username.prefix: Required value: prefix is required when claim is set"}},
		{"reserved extra key", edit(`username: {claim: sub, prefix: "hub:"}`, `username: {claim: sub, prefix: "hub:"}`+"\n    extra: [{key: authentication.kubernetes.io/pod-name, valueExpression: \"'x'\"}]"), []string{`providers[0].claimMappings.extra[0].key: Invalid value: "authentication.kubernetes.io/pod-name": k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use`}},
		{"CEL syntax error", edit("claimMappings:", "claimValidationRules: [{expression: 'claims.'}]\n  claimMappings:"), []string{`providers[0].claimValidationRules[0].expression: Invalid value: "claims.": compilation failed`}},
		{"claim rule with neither claim nor expression", edit("claimMappings:", "claimValidationRules: [{message: m}]\n  claimMappings:"), []string{"providers[0].claimValidationRules[0]: Required value: claim or expression is required"}},
		{"empty user rule", edit("claimMappings:", "userValidationRules: [{message: m}]\n  claimMappings:"), []string{"providers[0].userValidationRules[0].expression: Required value"}},
		{
			"every error at once",
			"jwksMinRefreshInterval: soon\nproviders:\n" + strings.NewReplacer("name: hub", "name: HUB", "allowedSubjects: [a]", "allowedSubjects: [a, a]", "audiences: [wharf]", "audiences: []").Replace(providerEntry),
			[]string{"jwksMinRefreshInterval: Invalid value", "providers[0].name: Invalid value", "providers[0].allowedSubjects[1]: Duplicate value", "providers[0].issuer.audiences: Required value"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("ParseConfig succeeded: %+v", cfg)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not wrap ErrInvalidConfig", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	big := filepath.Join(dir, "big.yaml")
	writeFile(t, good, validConfig)
	writeFile(t, big, validConfig+strings.Repeat("#", MaxConfigBytes))

	if _, err := LoadConfig(good); err != nil {
		t.Errorf("LoadConfig(good): %v", err)
	}
	if _, err := LoadConfig(big); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("LoadConfig(big) = %v, want too large", err)
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadConfig(missing) = %v, want not exist", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
