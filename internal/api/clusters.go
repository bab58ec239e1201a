package api

import (
	"net/http"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/fleet"
)

// clusters answers GET /api/clusters: every cluster of the fleet with its
// health, whether it drains and, with leader election, its owner.
func (s *Server) clusters(w http.ResponseWriter, _ *http.Request) error {
	def, _ := s.profile().Cluster("")
	var out []apiv1.Cluster
	owners := s.Owners()
	for _, c := range s.Clients.All() {
		out = append(out, apiv1.Cluster{Name: c.Entry.Name, Server: c.Entry.Server, LoopNamespace: c.Entry.LoopNamespace,
			Default: c.Entry.Name == def.Name, Draining: s.Clients.Draining(c.Entry.Name), Owner: owners[c.Entry.Name], Health: c.Health()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// noClusters is the Clusters of a server without a fleet (tests, benches).
type noClusters struct{}

func (noClusters) All() []*fleet.Client             { return nil }
func (noClusters) Get(string) (*fleet.Client, bool) { return nil, false }
func (noClusters) Draining(string) bool             { return false }

var _ Clusters = noClusters{}
