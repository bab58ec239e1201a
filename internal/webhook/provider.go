package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"

	"crucible.dev/crucible/internal/jwt"
)

// celCompiler is shared by validation and every authenticator: building its
// CEL environment is the expensive part, compiling expressions is cheap.
var celCompiler = sync.OnceValue(authenticationcel.NewDefaultCompiler)

// reservedExtraPrefix is kube-apiserver's own namespace for user extra keys
// (pod name, credential id); a webhook must never emit it.
const reservedExtraPrefix = "authentication.kubernetes.io/"

// systemPrefix is the namespace of Kubernetes' built-in users and groups.
const systemPrefix = "system:"

// Results of a review, as in metrics and logs.
const (
	resultAuthenticated = "authenticated"
	resultRejected      = "rejected"
	resultError         = "error"
)

// provider is one configured issuer, built: kube-apiserver's JWT
// authenticator over crucible's key set, plus the subject allowlist.
type provider struct {
	name    string
	issuer  string
	allowed sets.Set[string]
	keys    *keySet
	authn   authenticator.Token
}

// noNetwork keeps the JWT library off the network: with a KeySet it only
// needs a client for distributed claims, which a hub service-account token
// never has. All fetching is the key set's, under its rate limit.
var noNetwork = &http.Client{Transport: refuseTransport{}}

type refuseTransport struct{}

func (refuseTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("crucible's authn webhook makes no requests on behalf of the JWT library")
}

func buildProvider(ctx context.Context, pc ProviderConfig, keys *keySet) (*provider, error) {
	authnConfig := pc.JWT
	authnConfig.Issuer.DiscoveryURL = "" // the key set does discovery; the library refuses both
	authn, err := oidc.New(ctx, oidc.Options{
		JWTAuthenticator:     authnConfig,
		KeySet:               keys.KeySet,
		Client:               noNetwork,
		Compiler:             celCompiler(),
		SupportedSigningAlgs: jwt.AlgorithmNames(),
	})
	if err != nil {
		return nil, fmt.Errorf("build authenticator for provider %s: %w", pc.Name, err)
	}
	return &provider{
		name:    pc.Name,
		issuer:  pc.JWT.Issuer.URL,
		allowed: sets.New(pc.AllowedSubjects...),
		keys:    keys,
		authn:   authn,
	}, nil
}

// outcome is a review's answer plus what is logged about it. reason never
// contains the token.
type outcome struct {
	provider string
	result   string
	reason   string
	user     authv1.UserInfo // set when authenticated
	err      string          // status.error, set when result is error
}

func rejected(provider, reason string) outcome {
	return outcome{provider: provider, result: resultRejected, reason: reason}
}

// authenticate routes the token, verifies its signature with the provider's
// key set (fetching keys when needed), lets the JWT library decide, then
// applies crucible's checks.
//
// The key set answers first because the library flattens its errors into
// text: only here can "cannot decide now" (jwt.ErrUnavailable: keys
// missing, failing, or a kid still within its grace after a hub key
// rotation) become status.error, which kube-apiserver does not cache,
// instead of an authenticated:false it would cache for two minutes. The
// library then verifies again with the loaded key, without I/O.
func (s *snapshot) authenticate(ctx context.Context, token string) outcome {
	p, tok, ok, err := s.router.route(token)
	switch {
	case err != nil:
		return rejected("", err.Error())
	case !ok:
		return rejected("", "no provider has the token's issuer")
	}
	if _, err := p.keys.Verify(ctx, token); errors.Is(err, jwt.ErrUnavailable) {
		msg := fmt.Sprintf("crucible authn webhook: keys of provider %s unavailable: %v", p.name, err)
		return outcome{provider: p.name, result: resultError, reason: err.Error(), err: msg}
	} else if err != nil {
		return rejected(p.name, err.Error())
	}
	resp, ok, err := p.authn.AuthenticateToken(ctx, token)
	switch {
	case err != nil:
		return rejected(p.name, err.Error())
	case !ok:
		return rejected(p.name, "issuer mismatch")
	}
	if reason := p.refuse(tok.Claims.Subject, resp.User); reason != "" {
		return rejected(p.name, reason)
	}
	return outcome{provider: p.name, result: resultAuthenticated, reason: "ok", user: userInfo(resp.User)}
}

// refuse applies crucible's checks to a token the library accepted: its sub
// must be allow-listed, and the mapped username and groups must not claim
// Kubernetes' system: names. It returns why it refuses, or "".
func (p *provider) refuse(sub string, u user.Info) string {
	if !p.allowed.Has(sub) {
		return "subject not in allowedSubjects"
	}
	if strings.HasPrefix(u.GetName(), systemPrefix) {
		return "mapped username starts with system:"
	}
	for _, g := range u.GetGroups() {
		if strings.HasPrefix(g, systemPrefix) {
			return "a mapped group starts with system:"
		}
	}
	return ""
}

// userInfo is the answer's user. It drops extra keys under
// authentication.kubernetes.io/: kube-apiserver copies a webhook's extra
// through unchecked, and those keys are its own. (The library adds
// credential-id from the jti claim; validation refuses configured ones.)
func userInfo(u user.Info) authv1.UserInfo {
	info := authv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	for k, v := range u.GetExtra() {
		if strings.HasPrefix(k, reservedExtraPrefix) {
			continue
		}
		if info.Extra == nil {
			info.Extra = map[string]authv1.ExtraValue{}
		}
		info.Extra[k] = v
	}
	return info
}
