package devstack

import (
	"fmt"
	"slices"
)

// Spokes that share an API server (Options.SpokesPerServer, issue 42): ten
// real spokes fill this machine, while crucible's cost per spoke — a client,
// a watch, a Lease, workers, a validator, a health probe — is its own and
// can be measured far past ten. A guest is a spoke in every way the
// controller can see: its own name and audience, its own token from the
// hub, its own loop namespace (loops-<name>) with its own turn account and
// RBAC, its own provider in the webhook of the server it shares. What it
// shares is its host's processes: kube-apiserver, scheduler,
// controller-manager and nodes. So it has no capacity view (it would count
// its host's nodes again), and what needs a server of its own — nodes, an
// issuer, the built-in authenticator, another token webhook, run-live off
// — is refused for it.
//
// All spokes on one server also map to one user there (the hub's subject
// behind the same username prefix), so a guest's token would be good in
// its neighbours' loop namespaces: a measuring rig, not a tenancy boundary.

// guestSpoke is a spoke without a server of its own.
type guestSpoke struct {
	opts SpokeOptions
	host string
}

// groupSpokes splits spokes into servers (the first of every group of
// perServer, in order) and guests on them.
func groupSpokes(spokes []SpokeOptions, perServer int) (servers []SpokeOptions, guests []guestSpoke) {
	if perServer <= 1 {
		return spokes, nil
	}
	for i, so := range spokes {
		if i%perServer == 0 {
			servers = append(servers, so)
			continue
		}
		guests = append(guests, guestSpoke{opts: so, host: spokes[i-i%perServer].Name})
	}
	return servers, guests
}

// validateGuests refuses what a guest cannot have without a server of its
// own, naming the spoke and the option.
func validateGuests(o *Options) []error {
	if o.SpokesPerServer < 0 {
		return []error{fmt.Errorf("spokesPerServer %d: must not be negative", o.SpokesPerServer)}
	}
	_, guests := groupSpokes(o.Spokes, o.SpokesPerServer)
	var errs []error
	for _, g := range guests {
		so := g.opts
		for option, set := range map[string]bool{
			"nodes": len(so.Nodes) > 0 && !slices.Equal(nodeNames(so.Nodes), nodeNames(DefaultNodes(so.Name))), "tokenWebhook": so.TokenWebhook != nil,
			"issuer": so.Issuer != "", "builtinHubAuthn": so.BuiltinHubAuthn, "noRunLive": so.NoRunLive,
		} {
			if set {
				errs = append(errs, fmt.Errorf("spoke %s shares %s's API server (spokesPerServer %d) and cannot have %s of its own", so.Name, g.host, o.SpokesPerServer, option))
			}
		}
	}
	return errs
}

// loopNamespace is where spoke name's work pods run: SpokeNamespace, or
// loops-<name> where spokes share a server.
func (s *Stack) loopNamespace(name string) string {
	if s.opts.SpokesPerServer > 1 {
		return SpokeNamespace + "-" + name
	}
	return SpokeNamespace
}

// addGuests adds every guest to Spokes, after the servers, with its host's
// server, identities and nodes.
func (s *Stack) addGuests() {
	for _, g := range s.guests {
		host := s.Spoke(g.host)
		s.Spokes = append(s.Spokes, &Cluster{
			Name: g.opts.Name, Server: host.Server, KubeconfigFile: host.KubeconfigFile, Admin: host.Admin, Client: host.Client,
			ServiceAccountKey: host.ServiceAccountKey, Nodes: host.Nodes, NodeName: host.NodeName, RunLive: host.RunLive,
			Host: host.Name, LoopNamespace: s.loopNamespace(g.opts.Name), dir: host.dir,
		})
		if f := s.Federation; f != nil { // the webhook it has is its host's
			f.WebhookURLs[g.opts.Name], f.WebhookMetricsURLs[g.opts.Name] = f.WebhookURLs[host.Name], f.WebhookMetricsURLs[host.Name]
			f.WebhookClientCerts[g.opts.Name] = f.WebhookClientCerts[host.Name]
		}
	}
}

// servers are the spokes that run an API server (and nodes) of their own.
func (s *Stack) servers() []*Cluster {
	var out []*Cluster
	for _, c := range s.Spokes {
		if c.Host == "" {
			out = append(out, c)
		}
	}
	return out
}

// guestsOf names the guests of server host, in order.
func (s *Stack) guestsOf(host string) []string {
	var names []string
	for _, g := range s.guests {
		if g.host == host {
			names = append(names, g.opts.Name)
		}
	}
	return names
}

// spokeOptions are the options spoke name was started with.
func (s *Stack) spokeOptions(name string) SpokeOptions {
	for _, so := range s.opts.Spokes {
		if so.Name == name {
			return so
		}
	}
	for _, g := range s.guests {
		if g.opts.Name == name {
			return g.opts
		}
	}
	return SpokeOptions{}
}
