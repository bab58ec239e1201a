package apiauth

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"unicode"
)

// Limits on what a proxy may assert; beyond them the request is refused.
const (
	maxNameBytes = 512
	maxGroups    = 256
)

// Proxy is auth "proxy": an SSO proxy in front of the controller (e.g.
// oauth2-proxy) authenticates users and passes the identity in headers. The
// headers are believed only from the proxy's own addresses (the TCP peer,
// never X-Forwarded-For): the same headers from anyone else are refused, so
// a caller that bypasses the proxy cannot name itself. In a cluster the
// proxy's addresses are the pod CIDR, which every pod shares, so
// RequireClientCert also asks for proof: a client certificate the TLS
// handshake verified against [api] proxy_client_ca.
type Proxy struct {
	Trusted      []netip.Prefix
	UserHeader   string // e.g. X-Auth-Request-User
	GroupsHeader string // e.g. X-Auth-Request-Groups; comma-separated, may repeat
	// RequireClientCert believes the headers only on a connection whose
	// client certificate was verified (the listener asks every client for
	// one and verifies what it is given; see httpserve.Options).
	RequireClientCert bool
}

var _ Authenticator = (*Proxy)(nil)

// Authenticate reads the identity headers of a trusted peer.
func (p *Proxy) Authenticate(r *http.Request) (Identity, error) {
	users := r.Header.Values(p.UserHeader)
	if err := p.checkPeer(r, len(users) > 0 || len(r.Header.Values(p.GroupsHeader)) > 0); err != nil {
		return Identity{}, err
	}
	if len(users) != 1 || users[0] == "" {
		return Identity{}, fmt.Errorf("%w: the proxy sent no single %s header", ErrUnauthenticated, p.UserHeader)
	}
	user := strings.TrimSpace(users[0])
	if err := checkName(p.UserHeader, user); err != nil {
		return Identity{}, err
	}
	var groups []string
	for _, v := range r.Header.Values(p.GroupsHeader) {
		for g := range strings.SplitSeq(v, ",") {
			g = strings.TrimSpace(g)
			if g == "" {
				continue
			}
			if err := checkName(p.GroupsHeader, g); err != nil {
				return Identity{}, err
			}
			groups = append(groups, g)
		}
	}
	if len(groups) > maxGroups {
		return Identity{}, fmt.Errorf("%w: more than %d groups in %s", ErrUnauthenticated, maxGroups, p.GroupsHeader)
	}
	return Identity{User: user, Groups: groups}, nil
}

// checkPeer refuses a request unless it comes from the proxy: a trusted
// address and, with RequireClientCert, a verified client certificate. The
// reason says which is missing; headers says whether the request named
// anyone (a caller that did not is only told to use the proxy).
func (p *Proxy) checkPeer(r *http.Request, headers bool) error {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return fmt.Errorf("%w: unknown peer address", ErrUnauthenticated)
	}
	addr := peer.Addr().Unmap()
	trusted := p.trusted(addr)
	switch {
	case trusted && (!p.RequireClientCert || verifiedClient(r)):
		return nil
	case !headers:
		return fmt.Errorf("%w: requests must come through the SSO proxy", ErrUnauthenticated)
	case !trusted:
		return fmt.Errorf("%w: identity headers from %s, which is not a trusted proxy", ErrUnauthenticated, addr)
	}
	return fmt.Errorf("%w: identity headers from %s without a verified client certificate (api.proxy_client_ca)", ErrUnauthenticated, addr)
}

func (p *Proxy) trusted(addr netip.Addr) bool {
	return slices.ContainsFunc(p.Trusted, func(t netip.Prefix) bool { return t.Contains(addr) })
}

// verifiedClient reports whether r's connection presented a client
// certificate that the handshake verified (a chain to the client CA).
func verifiedClient(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && len(r.TLS.VerifiedChains) > 0
}

// checkName refuses names an SSO user cannot legitimately have: empty,
// oversized, with control characters, or the hub's reserved system: names.
func checkName(header, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: empty name in %s", ErrUnauthenticated, header)
	case len(v) > maxNameBytes:
		return fmt.Errorf("%w: name over %d bytes in %s", ErrUnauthenticated, maxNameBytes, header)
	case strings.ContainsFunc(v, unicode.IsControl):
		return fmt.Errorf("%w: control character in %s", ErrUnauthenticated, header)
	case systemName(v):
		return fmt.Errorf("%w: %s names a reserved system: identity", ErrUnauthenticated, header)
	}
	return nil
}
