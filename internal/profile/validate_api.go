package profile

import (
	"fmt"
	"net"
	"strings"

	"golang.org/x/net/http/httpguts"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"crucible.dev/crucible/internal/urlcheck"
)

// validateAPI checks [api]. internalListen is the (validated elsewhere)
// controller.internal_listen: auth "none" is refused anywhere but loopback,
// because anyone reaching the listener could run any image on the spokes.
func validateAPI(a *API, path *field.Path, internalListen string) field.ErrorList {
	var errs field.ErrorList
	auth := path.Child("auth")
	switch a.Auth {
	case AuthNone:
		if host, _, err := net.SplitHostPort(internalListen); err == nil && !urlcheck.LoopbackHost(host) {
			errs = append(errs, field.Invalid(auth, a.Auth, fmt.Sprintf("only allowed when controller.internal_listen is a loopback address, not %q: anyone reaching it could run any image on the spokes; set api.auth to \"kubernetes\" or \"proxy\"", internalListen)))
		}
	case AuthKubernetes:
	case AuthProxy:
		if len(a.ProxyCIDRs) == 0 {
			errs = append(errs, field.Required(path.Child("proxy_cidrs"), "required when api.auth is \"proxy\" (the SSO proxy's addresses)"))
		}
	default:
		errs = append(errs, withDetail(field.NotSupported(auth, a.Auth, []string{AuthNone, AuthKubernetes, AuthProxy}), "must be none, kubernetes or proxy"))
	}
	errs = append(errs, dnsLabel(path.Child("namespace"), a.Namespace)...)
	errs = append(errs, cidrs(path.Child("proxy_cidrs"), a.ProxyCIDRs)...)
	errs = append(errs, headerName(path.Child("proxy_user_header"), a.ProxyUserHeader)...)
	errs = append(errs, headerName(path.Child("proxy_groups_header"), a.ProxyGroupsHeader)...)
	for i, h := range a.AllowedHosts {
		errs = append(errs, hostName(path.Child("allowed_hosts").Index(i), h)...)
	}
	if a.ProxyClientCA != "" && a.Auth != AuthProxy {
		errs = append(errs, field.Forbidden(path.Child("proxy_client_ca"), "only used with api.auth \"proxy\""))
	}
	if len(a.ProxyClientNames) > 0 && a.ProxyClientCA == "" {
		errs = append(errs, field.Forbidden(path.Child("proxy_client_names"), "only used with api.proxy_client_ca"))
	}
	for i, n := range a.ProxyClientNames {
		if n == "" {
			errs = append(errs, field.Invalid(path.Child("proxy_client_names").Index(i), n, "must not be empty"))
		}
	}
	errs = append(errs, notNegative(path.Child("auth_failures_per_source"), a.AuthFailuresPerSource)...)
	errs = append(errs, notNegative(path.Child("auth_failure_burst"), a.AuthFailureBurst)...)
	errs = append(errs, notNegative(path.Child("token_review_qps"), a.TokenReviewQPS)...)
	errs = append(errs, notNegative(path.Child("token_review_burst"), a.TokenReviewBurst)...)
	errs = append(errs, notNegative(path.Child("access_review_qps"), a.AccessReviewQPS)...)
	errs = append(errs, notNegative(path.Child("access_review_burst"), a.AccessReviewBurst)...)
	errs = append(errs, positive(path.Child("stream_recheck"), a.StreamRecheck)...)
	errs = append(errs, positive(path.Child("token_accept_ttl"), a.TokenAcceptTTL)...)
	errs = append(errs, positive(path.Child("token_negative_ttl"), a.TokenNegativeTTL)...)
	errs = append(errs, positive(path.Child("access_allow_ttl"), a.AccessAllowTTL)...)
	errs = append(errs, positive(path.Child("access_deny_ttl"), a.AccessDenyTTL)...)
	errs = append(errs, notNegative(path.Child("cache_size"), a.CacheSize)...)
	if a.PageSize < 0 || a.PageSize > MaxAPIPageSize {
		errs = append(errs, field.Invalid(path.Child("page_size"), a.PageSize, fmt.Sprintf("must be from 1 to %d", MaxAPIPageSize)))
	}
	return errs
}

// hostName checks a Host allowlist entry: a name or IP address, no port.
func hostName(path *field.Path, h string) field.ErrorList {
	if h == "" || strings.ContainsAny(h, " /@[]") || (strings.Contains(h, ":") && net.ParseIP(h) == nil) {
		return field.ErrorList{field.Invalid(path, h, "must be a host name or IP address without a port")}
	}
	return nil
}

// metadataPrefix checks a [pods] metadata_prefixes entry: the start of a
// label key, a DNS subdomain ending in "/" ("example.com/"), so that a
// prefix cannot be a part of a name ("example.co" would admit
// "example.com.evil/").
func metadataPrefix(path *field.Path, prefix string) field.ErrorList {
	domain, ok := strings.CutSuffix(prefix, "/")
	if !ok || domain == "" {
		return field.ErrorList{field.Invalid(path, prefix, "must be a DNS subdomain followed by \"/\", e.g. \"example.com/\"")}
	}
	if msgs := validation.IsDNS1123Subdomain(domain); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(path, prefix, strings.Join(msgs, "; "))}
	}
	return nil
}

func headerName(path *field.Path, v string) field.ErrorList {
	if !httpguts.ValidHeaderFieldName(v) {
		return field.ErrorList{field.Invalid(path, v, "must be an HTTP header name")}
	}
	return nil
}
