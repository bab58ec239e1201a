package e2e

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// A live log that ends while its pod's watch is held back — as a spoke's
// watch was for up to a minute after its API server restarted — ends with
// how the pod really ended, and the row says so too: the end event asks
// the spoke (Settle) and records what it says, log included. Every watch
// request to wharf hangs in a proxy, so no watch event can have moved the
// row; the stream's lines and its pod's state come through the same
// proxy's other requests.
func TestLiveLogEndsWithThePodsStateWhileTheWatchIsHeld(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	watches := make(chan string, 64)
	proxyURL, proxyCA := logProxy(t, wharf.Server, s.CAFile, holdWatches, watches)
	iso := isolatedReconciler(t, s, proxyURL, proxyCA, time.Minute)
	select {
	case <-watches:
	case <-time.After(time.Minute):
		t.Fatal("the reconciler never watched wharf: the proxy held nothing and the test proves nothing")
	}

	prof := profile.Default()
	apiSrv := api.New(api.Options{Profile: profile.NewCurrent(&prof), Store: iso.Store, Dispatcher: iso.Reconciler.Dispatcher, Clients: iso.Reconciler.Clients,
		Artifacts: iso.Artifacts, Settler: iso.Reconciler, Log: slog.New(slog.DiscardHandler), Retry: fleet.RetryPolicy(prof.Reconcile),
		MaxRequestBytes: 1 << 20, AllowedHosts: profile.DefaultAPIAllowedHosts()})
	mux := http.NewServeMux()
	apiSrv.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	name := "held-watch-" + suffix()
	// The pod starts after the reconciler's first list, which sees none of it.
	iso.Run(wharf, name, `sleep 2; echo "held: one"; echo "held: two"; exit 3`)
	v := &sseView{}
	v.view(t.Context(), srv.URL, name)
	checkViews(t, []*sseView{v}, []string{"held: one", "held: two"}, "failed")
	if v.end == nil || v.end.ExitCode == nil || *v.end.ExitCode != 3 {
		t.Errorf("end %+v, want exit code 3", v.end)
	}
	row, err := iso.Store.GetWorkPod(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if row.State != store.StateFailed || row.ExitCode == nil || *row.ExitCode != 3 || !row.LogCollected || row.PodUID == "" {
		t.Errorf("row %s exit %v log collected %t uid %q: want failed, exit 3, its log collected and its uid, as the watch would record",
			row.State, row.ExitCode, row.LogCollected, row.PodUID)
	}
	if _, err := iso.Store.GetArtifact(t.Context(), name, "log"); err != nil {
		t.Errorf("log artifact: %v", err)
	}
}
