package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"crucible.dev/crucible/internal/api"
	"crucible.dev/crucible/internal/api/apiv1"
	podevents "crucible.dev/crucible/internal/events"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/storetest"
)

// watchFixture is a real API server (auth none) on a real SQLite store whose
// changes feed its event bus.
func watchFixture(t *testing.T) (*httptest.Server, store.Store) {
	t.Helper()
	p := profile.Default()
	p.DefaultCluster, p.Clusters = "wharf", []profile.ClusterEntry{{Name: "wharf"}, {Name: "dock"}}
	bus, err := podevents.NewBus(p.Events)
	if err != nil {
		t.Fatal(err)
	}
	st := podevents.Store{Store: storetest.SQLite(t), Pub: bus}
	s := api.New(api.Options{
		Profile: profile.NewCurrent(&p),
		Store:   st, Events: bus, Log: slog.New(slog.DiscardHandler), MaxRequestBytes: 1 << 20,
		AllowedHosts: profile.DefaultAPIAllowedHosts(), PageSize: profile.DefaultAPIPageSize,
	})
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, st
}

func createRow(t *testing.T, st store.Store, id, cluster string) {
	t.Helper()
	if _, err := st.CreateWorkPod(t.Context(), store.WorkPod{ID: id, Cluster: cluster, Namespace: "loops", Kind: "turn", State: store.StatePending}); err != nil {
		t.Fatal(err)
	}
}

func TestPodsListWatch(t *testing.T) {
	srv, st := watchFixture(t)
	createRow(t, st, "turn-old", "wharf")

	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"pods", "list", "--watch", "-o", "json", "--cluster", "wharf", "--server", srv.URL}, pw, io.Discard)
		_ = pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	read := func() apiv1.WorkPod {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("output ended: %v", lines.Err())
		}
		var wp apiv1.WorkPod
		if err := json.Unmarshal(lines.Bytes(), &wp); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		return wp
	}
	if wp := read(); wp.ID != "turn-old" {
		t.Fatalf("listed %q first", wp.ID)
	}
	// The watch has started once the server holds a subscriber; until then
	// a change could land before it. Poll by making changes until one shows.
	deadline := time.Now().Add(10 * time.Second)
	n := 0
	var got apiv1.WorkPod
	seen := make(chan apiv1.WorkPod, 1)
	go func() { seen <- read() }()
	for got.ID == "" {
		n++
		createRow(t, st, "turn-dock-"+string(rune('a'+n)), "dock") // filtered out by --cluster
		createRow(t, st, "turn-new-"+string(rune('a'+n)), "wharf")
		select {
		case got = <-seen:
		case <-time.After(200 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no change printed within 10s")
			}
		}
	}
	if !strings.HasPrefix(got.ID, "turn-new-") || got.Cluster != "wharf" || got.State != store.StatePending {
		t.Fatalf("watched %+v", got)
	}
	if _, err := st.UpdateWorkPod(t.Context(), got.ID, func(p *store.WorkPod) error { p.State = store.StateRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	for {
		wp := read()
		if wp.ID == got.ID && wp.State == store.StateRunning {
			break
		}
		if wp.Cluster != "wharf" {
			t.Fatalf("a change of another cluster was printed: %+v", wp)
		}
	}
	cancel()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	var ee *ExitError
	if err := <-done; !errors.As(err, &ee) || ee.Code != ExitInterrupted {
		t.Fatalf("watch ended with %v, want exit %d", err, ExitInterrupted)
	}
}

// A reset makes the watcher list again; a refused watch is reported.
func TestPodsWatchResetAndRefusal(t *testing.T) {
	var mu sync.Mutex
	lists, watches := 0, 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/pods", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		lists++
		mu.Unlock()
		_, _ = io.WriteString(w, `[{"id":"turn-a","cluster":"wharf","kind":"turn","state":"running"}]`)
	})
	mux.HandleFunc("GET /api/events", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		watches++
		n := watches
		mu.Unlock()
		if n == 1 {
			events("event: reset\ndata: {}")(w)
			return
		}
		http.Error(w, `{"error":"forbidden: you may not list"}`, http.StatusForbidden)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var out, errOut strings.Builder
	err := Run(t.Context(), []string{"pods", "list", "-w", "--server", srv.URL}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "forbidden: you may not list (HTTP 403)") {
		t.Fatalf("err %v", err)
	}
	if lists != 2 || strings.Count(out.String(), "turn-a") != 2 || !strings.Contains(errOut.String(), "listing again") {
		t.Fatalf("lists=%d out=%q err=%q", lists, out.String(), errOut.String())
	}
}
