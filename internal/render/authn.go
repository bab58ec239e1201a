package render

import (
	"errors"
	"fmt"
	"strings"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"
)

// HubTrust is how a spoke trusts the hub controller's tokens: which issuer,
// where the keys are (the controller's discovery mirror), for which audience
// (the spoke's name), and for which subjects. It renders both ways a spoke can
// express that trust (R-WH5).
type HubTrust struct {
	// Issuer is the hub's service-account issuer.
	Issuer string
	// DiscoveryURL is the mirror's /.well-known/openid-configuration.
	DiscoveryURL string
	// CertificateAuthority (PEM) verifies the mirror; empty for public CAs.
	CertificateAuthority string
	// Audience is the audience the controller's token for this spoke carries.
	Audience string
	// SharedWith are the audiences of spokes that share this spoke's API
	// server (the dev stack's shared-server spokes), accepted beside
	// Audience: one provider per issuer, as kube-apiserver and the webhook
	// route a token by its issuer, with any of the audiences matching.
	SharedWith []string
	// AllowedSubjects are the exact `sub` values accepted.
	AllowedSubjects []string
	// UsernamePrefix marks hub identities on the spoke (e.g. "hub:").
	UsernamePrefix string
}

// matchPolicy is kube-apiserver's: required (MatchAny) with more than one
// audience, absent with one.
func (t HubTrust) matchPolicy() apiserverv1.AudienceMatchPolicyType {
	if len(t.SharedWith) > 0 {
		return apiserverv1.AudienceMatchPolicyMatchAny
	}
	return ""
}

func (t HubTrust) jwt() apiserverv1.JWTAuthenticator {
	prefix, discovery := t.UsernamePrefix, t.DiscoveryURL
	return apiserverv1.JWTAuthenticator{
		Issuer: apiserverv1.Issuer{
			URL: t.Issuer, DiscoveryURL: &discovery, CertificateAuthority: t.CertificateAuthority,
			Audiences:           append([]string{t.Audience}, t.SharedWith...),
			AudienceMatchPolicy: t.matchPolicy(),
		},
		ClaimMappings: apiserverv1.ClaimMappings{
			Username: apiserverv1.PrefixedClaimOrExpression{Claim: "sub", Prefix: &prefix},
		},
	}
}

// webhookProvider is one provider of crucible's authn-webhook file: a
// kube-apiserver jwt entry plus name and subject allowlist.
type webhookProvider struct {
	Name                         string   `json:"name"`
	AllowedSubjects              []string `json:"allowedSubjects"`
	apiserverv1.JWTAuthenticator `json:",inline"`
}

// WebhookConfig renders the configuration file of `crucible authn-webhook`
// for a spoke that shares the hub's issuer string (ADR-0048's case), where
// only a webhook can tell hub tokens apart by their keys.
func WebhookConfig(t HubTrust) ([]byte, error) {
	file := struct {
		Providers []webhookProvider `json:"providers"`
	}{Providers: []webhookProvider{{Name: "hub", AllowedSubjects: t.AllowedSubjects, JWTAuthenticator: t.jwt()}}}
	return yaml.Marshal(file)
}

// ErrUsernamePrefix means a username prefix that would let hub identities
// pass for the spoke's own.
var ErrUsernamePrefix = errors.New("username prefix")

// systemPrefix starts every name Kubernetes reserves for itself (nodes,
// service accounts, system:masters...).
const systemPrefix = "system:"

// userValidationRules refuse reserved names after mapping. The username
// prefix already keeps hub names out of system:, and no groups claim is
// mapped; these rules hold even if someone edits the mappings later, which
// kube-apiserver's built-in authenticator would otherwise not stop (crucible's
// webhook refuses such names in code).
var userValidationRules = []apiserverv1.UserValidationRule{
	{Expression: "!user.username.startsWith('" + systemPrefix + "')", Message: "hub identities must not map to system: usernames"},
	{Expression: "user.groups.all(g, !g.startsWith('" + systemPrefix + "'))", Message: "hub identities must not map to system: groups"},
}

// checkUsernamePrefix refuses a prefix that maps the hub's
// system:serviceaccount:... subjects onto reserved spoke names: an empty one
// keeps them verbatim, a system: one reserves them by construction.
func checkUsernamePrefix(prefix string) error {
	switch {
	case strings.TrimSpace(prefix) == "":
		return fmt.Errorf("%w: must not be empty: hub subjects are system:serviceaccount:... names and would pass for the spoke's own", ErrUsernamePrefix)
	case strings.HasPrefix(prefix, systemPrefix):
		return fmt.Errorf("%w %q: must not start with %q, which Kubernetes reserves", ErrUsernamePrefix, prefix, systemPrefix)
	}
	return nil
}

// AuthenticationConfiguration renders kube-apiserver's own structured
// authentication for a spoke whose service-account issuer differs from the
// hub's, so its built-in JWT authenticator can validate hub tokens: the same
// trust as WebhookConfig, the subject allowlist as a CEL claim rule, and
// userValidationRules that refuse system: usernames and groups (the webhook
// does that in code). It refuses an empty or system: username prefix.
func AuthenticationConfiguration(t HubTrust) ([]byte, error) {
	if err := checkUsernamePrefix(t.UsernamePrefix); err != nil {
		return nil, err
	}
	// One rule accepting any allowed subject (rules are ANDed); none allowed
	// means nobody, as in the webhook, never everybody.
	expr := "false"
	for i, sub := range t.AllowedSubjects {
		if i == 0 {
			expr = ""
		} else {
			expr += " || "
		}
		expr += fmt.Sprintf("claims.sub == %q", sub)
	}
	jwt := t.jwt()
	jwt.ClaimValidationRules = []apiserverv1.ClaimValidationRule{{Expression: expr, Message: "subject not allowed"}}
	jwt.UserValidationRules = userValidationRules
	cfg := apiserverv1.AuthenticationConfiguration{JWT: []apiserverv1.JWTAuthenticator{jwt}}
	cfg.APIVersion, cfg.Kind = apiserverv1.SchemeGroupVersion.String(), "AuthenticationConfiguration"
	return yaml.Marshal(cfg)
}
