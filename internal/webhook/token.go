package webhook

import (
	"crucible.dev/crucible/internal/jwt"
)

// router picks the provider for a token by its unverified iss claim, read
// by jwt.Parse (which also refuses oversized and malformed tokens, algs
// other than jwt.Algorithms, and crit headers). Issuers are unique across
// providers (validation enforces it), so at most one matches; the match is
// byte for byte, as in kube-apiserver. The issuer and key id only pick a
// provider and a key; the subject is trusted once the JWT library has
// verified this exact token.
type router[P any] struct {
	byIssuer map[string]P
}

func newRouter[P any]() router[P] {
	return router[P]{byIssuer: map[string]P{}}
}

// route returns the token's provider and its untrusted content. ok is false
// when no provider's issuer matches; err (wrapping jwt.ErrMalformed) is set
// when the token is malformed.
func (r router[P]) route(token string) (p P, tok jwt.Token, ok bool, err error) {
	tok, err = jwt.Parse(token)
	if err != nil {
		return p, tok, false, err
	}
	p, ok = r.byIssuer[tok.Claims.Issuer]
	return p, tok, ok, nil
}
