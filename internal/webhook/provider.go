package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

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
		KeySet:               recordingKeySet{keys.KeySet},
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
	exp      time.Time       // the token's exp, set when authenticated
	status   []byte          // the answer's status, encoded (encodeStatus)
}

func rejected(provider, reason string) outcome {
	return outcome{provider: provider, result: resultRejected, reason: reason}
}

// authenticate routes the token and lets the JWT library decide, then
// applies crucible's checks.
//
// The library verifies the signature through recordingKeySet, which calls
// the provider's key set (fetching keys when needed) and records its
// outcome: the library flattens errors into text, so only the record can
// turn "cannot decide now" (jwt.ErrUnavailable: keys missing, failing, or a
// kid still within its grace after a hub key rotation) into status.error,
// which kube-apiserver does not cache, instead of an authenticated:false it
// would cache for two minutes. The library checks the signature before any
// claim, so every token it judges passes through the record, and the
// signature is checked once per review.
func (s *snapshot) authenticate(ctx context.Context, token string) outcome {
	p, tok, ok, err := s.router.route(token)
	switch {
	case err != nil:
		return rejected("", err.Error())
	case !ok:
		return rejected("", "no provider has the token's issuer")
	}
	rec := &verifyRecord{}
	resp, ok, err := p.authn.AuthenticateToken(context.WithValue(ctx, verifyRecordKey{}, rec), token)
	if errors.Is(rec.err, jwt.ErrUnavailable) {
		msg := "crucible authn webhook: keys of provider " + p.name + " unavailable: " + rec.err.Error()
		return outcome{provider: p.name, result: resultError, reason: rec.err.Error(), err: msg}
	}
	switch {
	case err != nil:
		return rejected(p.name, err.Error())
	case !ok:
		return rejected(p.name, "issuer mismatch")
	case !rec.called:
		// Unreachable with the library as it is; if a version ever skipped
		// the key set, nothing here would have checked the signature.
		return rejected(p.name, "signature not verified")
	}
	if reason := p.refuse(tok.Claims.Subject, resp.User); reason != "" {
		return rejected(p.name, reason)
	}
	return outcome{provider: p.name, result: resultAuthenticated, reason: "ok", user: userInfo(resp.User), exp: tok.Claims.Expiry}
}

// verifyRecord is what recordingKeySet saw during one review.
type verifyRecord struct {
	called bool
	err    error // the key set's error, nil when the signature verified
}

type verifyRecordKey struct{}

// recordingKeySet is the KeySet the JWT library verifies signatures with:
// the provider's key set, plus a note of the outcome in the review's
// verifyRecord (from the context) so that authenticate can tell
// "unavailable" from "invalid" without verifying a second time.
type recordingKeySet struct {
	keys *jwt.KeySet
}

// VerifySignature implements go-oidc's KeySet.
func (k recordingKeySet) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	payload, err := k.keys.Verify(ctx, token)
	if rec, ok := ctx.Value(verifyRecordKey{}).(*verifyRecord); ok {
		rec.called, rec.err = true, err
	}
	return payload, err
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
