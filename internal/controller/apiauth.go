package controller

import (
	"fmt"
	"net/netip"

	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/fleet"
)

// apiAuth builds the API's authenticator and authorizer for [api] auth. The
// reviews go to the hub with the controller's own hub identity.
func apiAuth(a fleet.API, hubCfg *rest.Config) (api.Authenticator, api.Authorizer, error) {
	if a.Auth == fleet.AuthNone {
		return apiauth.Anonymous{}, apiauth.AllowAll{}, nil
	}
	// Every uncached API request costs one or two reviews: client-go's
	// default 5 QPS would make the hub's limiter the API's.
	cfg := rest.CopyConfig(hubCfg)
	cfg.QPS, cfg.Burst = 200, 400
	_, client, err := fleet.NewClientset("hub", cfg) // follows no redirect
	if err != nil {
		return nil, nil, fmt.Errorf("hub review client: %w", err)
	}
	hub := apiauth.Hub{Client: client}
	authz := apiauth.NewSubjectAccess(hub, a.Namespace, a.AccessAllowTTL.Duration, a.AccessDenyTTL.Duration, a.CacheSize)
	switch a.Auth {
	case fleet.AuthKubernetes:
		return apiauth.NewBearer(hub, a.TokenAcceptTTL.Duration, a.TokenNegativeTTL.Duration, a.CacheSize), authz, nil
	case fleet.AuthProxy:
		p := &apiauth.Proxy{UserHeader: a.ProxyUserHeader, GroupsHeader: a.ProxyGroupsHeader}
		for _, cidr := range a.ProxyCIDRs {
			prefix, err := netip.ParsePrefix(cidr)
			if err != nil {
				return nil, nil, fmt.Errorf("api.proxy_cidrs: %w", err)
			}
			p.Trusted = append(p.Trusted, prefix.Masked())
		}
		return p, authz, nil
	}
	return nil, nil, fmt.Errorf("api.auth %q: unknown mode", a.Auth)
}
