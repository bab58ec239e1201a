package fleet

import (
	"fmt"
	"golang.org/x/net/http/httpguts"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// validate checks [api]. internalListen is the (validated elsewhere)
// controller.internal_listen: auth "none" is refused anywhere but loopback,
// because anyone reaching the listener could run any image on the spokes.
func (a *API) validate(ps *problems, internalListen string) {
	switch a.Auth {
	case AuthNone:
		if host, _, err := net.SplitHostPort(internalListen); err == nil && !isLoopback(host) {
			ps.invalid("api.auth", a.Auth, fmt.Sprintf("only allowed when controller.internal_listen is a loopback address, not %q: anyone reaching it could run any image on the spokes; set api.auth to \"kubernetes\" or \"proxy\"", internalListen))
		}
	case AuthKubernetes:
	case AuthProxy:
		if len(a.ProxyCIDRs) == 0 {
			ps.add("api.proxy_cidrs", "required when api.auth is \"proxy\" (the SSO proxy's addresses)")
		}
	default:
		ps.invalid("api.auth", a.Auth, "must be none, kubernetes or proxy")
	}
	dnsLabel(ps, "api.namespace", a.Namespace)
	for i, cidr := range a.ProxyCIDRs {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			ps.invalid(fmt.Sprintf("api.proxy_cidrs[%d]", i), cidr, "must be a CIDR such as 10.0.0.0/8")
		}
	}
	headerName(ps, "api.proxy_user_header", a.ProxyUserHeader)
	headerName(ps, "api.proxy_groups_header", a.ProxyGroupsHeader)
	for i, h := range a.AllowedHosts {
		if h == "" || strings.ContainsAny(h, " /@[]") || (strings.Contains(h, ":") && net.ParseIP(h) == nil) {
			ps.invalid(fmt.Sprintf("api.allowed_hosts[%d]", i), h, "must be a host name or IP address without a port")
		}
	}
	positive(ps, "api.token_accept_ttl", a.TokenAcceptTTL)
	positive(ps, "api.token_negative_ttl", a.TokenNegativeTTL)
	positive(ps, "api.access_allow_ttl", a.AccessAllowTTL)
	positive(ps, "api.access_deny_ttl", a.AccessDenyTTL)
	if a.CacheSize < 0 {
		ps.invalid("api.cache_size", strconv.Itoa(a.CacheSize), "must be positive")
	}
	if a.PageSize < 0 || a.PageSize > MaxAPIPageSize {
		ps.invalid("api.page_size", strconv.Itoa(a.PageSize), fmt.Sprintf("must be from 1 to %d", MaxAPIPageSize))
	}
}

func headerName(ps *problems, path, v string) {
	if !httpguts.ValidHeaderFieldName(v) {
		ps.invalid(path, v, "must be an HTTP header name")
	}
}
