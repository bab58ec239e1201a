package controller

import (
	"fmt"
	"log/slog"
	"net/netip"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
)

// apiAuth builds the API's authenticator and authorizer for [api] auth. The
// reviews go to the hub with the controller's own hub identity, each kind
// on a client-side rate limit of its own: a flood of tokens to review must
// not starve the SubjectAccessReviews of callers already known.
func apiAuth(p *profile.Profile, hubCfg *rest.Config, log *slog.Logger) (api.Authenticator, api.Authorizer, error) {
	a := p.API
	if a.Auth == profile.AuthNone {
		return apiauth.Anonymous{}, apiauth.AllowAll{}, nil
	}
	access, err := reviewClient(hubCfg, "api.access_review_qps", a.AccessReviewQPS, a.AccessReviewBurst)
	if err != nil {
		return nil, nil, err
	}
	authz := apiauth.NewSubjectAccess(apiauth.Hub{Client: access}, a.Namespace, a.AccessAllowTTL.Duration, a.AccessDenyTTL.Duration, a.CacheSize)
	switch a.Auth {
	case profile.AuthKubernetes:
		tokens, err := reviewClient(hubCfg, "api.token_review_qps", a.TokenReviewQPS, a.TokenReviewBurst)
		if err != nil {
			return nil, nil, err
		}
		b := apiauth.NewBearer(apiauth.Hub{Client: tokens}, a.TokenAcceptTTL.Duration, a.TokenNegativeTTL.Duration, a.CacheSize).
			WithFailureBudget(float64(a.AuthFailuresPerSource), a.AuthFailureBurst, a.CacheSize, log)
		return b, authz, nil
	case profile.AuthProxy:
		proxy, err := proxyAuth(p)
		if err != nil {
			return nil, nil, err
		}
		return proxy, authz, nil
	}
	return nil, nil, fmt.Errorf("api.auth %q: unknown mode", a.Auth)
}

// reviewClient is a hub clientset of its own, limited to qps with burst
// (key names the setting in errors): client-go's default 5 QPS would make
// the client's limiter the API's. A review that cannot get a token from it
// in time fails as the hub not answering: 503, never a cached refusal.
func reviewClient(hubCfg *rest.Config, key string, qps float32, burst int) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(hubCfg)
	cfg.QPS, cfg.Burst = qps, burst
	_, client, err := fleet.NewClientset("hub", cfg) // follows no redirect
	if err != nil {
		return nil, fmt.Errorf("hub review client (%s): %w", key, err)
	}
	return client, nil
}

// checkProxyClientCA refuses api.proxy_client_ca on a plain-HTTP internal
// listener: the proxy's client certificate is asked for in the listener's
// TLS handshake, and a controller that started anyway would trust
// addresses alone. Checked before anything is opened.
func checkProxyClientCA(p *profile.Profile) error {
	if p.API.ProxyClientCA != "" && p.Controller.InternalTLSCert == "" {
		return fmt.Errorf("api.proxy_client_ca %q needs controller.internal_tls_cert (and internal_tls_key): the proxy's client certificate is asked for in the internal listener's TLS handshake", p.API.ProxyClientCA)
	}
	return nil
}

// proxyAuth is auth "proxy"; with api.proxy_client_ca the identity headers
// also need the proxy's verified client certificate.
func proxyAuth(p *profile.Profile) (*apiauth.Proxy, error) {
	a := p.API
	proxy := &apiauth.Proxy{UserHeader: a.ProxyUserHeader, GroupsHeader: a.ProxyGroupsHeader, RequireClientCert: a.ProxyClientCA != ""}
	for _, cidr := range a.ProxyCIDRs {
		prefix, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("api.proxy_cidrs: %w", err)
		}
		proxy.Trusted = append(proxy.Trusted, prefix.Masked())
	}
	return proxy, nil
}
