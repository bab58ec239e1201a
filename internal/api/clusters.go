package api

import (
	"net/http"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/fleet"
)

// clusters answers GET /api/clusters: every cluster of the fleet with its
// health, whether it drains, with leader election its owner, and its live
// pods by state, counted for the whole fleet in one query (a table of a
// hundred spokes would otherwise list each one's pods). A store that cannot
// count leaves the counts out rather than the health.
func (s *Server) clusters(w http.ResponseWriter, r *http.Request) error {
	def, _ := s.profile().Cluster("")
	var out []apiv1.Cluster
	owners := s.Owners()
	live, err := s.Store.CountLive(r.Context())
	if err != nil {
		s.Log.Warn("clusters listed without their live pods", "error", err)
	}
	for _, c := range s.Clients.All() {
		cl := apiv1.Cluster{Name: c.Entry.Name, Server: c.Entry.Server, LoopNamespace: c.Entry.LoopNamespace,
			Default: c.Entry.Name == def.Name, Draining: s.Clients.Draining(c.Entry.Name), Owner: owners[c.Entry.Name], Health: c.Health()}
		if err == nil {
			n := live[c.Entry.Name]
			cl.Live = &apiv1.LiveCounts{Pending: n.Pending, Dispatched: n.Dispatched, Running: n.Running}
		}
		out = append(out, cl)
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
