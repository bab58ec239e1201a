package api

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/store"
)

// A store that cannot serve right now (the database restarting, refusing
// connections) is answered 503 with Retry-After, so clients retry; a store
// error that is no such thing stays a 500 with a fixed message; neither
// leaks the cause.
func TestFailStoreUnavailable(t *testing.T) {
	s := New(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	cases := map[string]struct {
		err        error
		code       int
		retryAfter bool
	}{
		"connection refused": {fmt.Errorf("record work pod: %w", syscall.ECONNREFUSED), http.StatusServiceUnavailable, true},
		"server shutting down": {fmt.Errorf("record work pod: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}),
			http.StatusServiceUnavailable, true},
		"constraint":     {fmt.Errorf("record work pod: %w", &pgconn.PgError{Code: "23502", Message: "secret column"}), http.StatusInternalServerError, false},
		"not classified": {errors.New("secret detail"), http.StatusInternalServerError, false},
		"not found":      {httperr.Wrap(http.StatusNotFound, "no such work pod", store.ErrNotFound), http.StatusNotFound, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s.edge().Fail(rec, httptest.NewRequest(http.MethodPost, "/api/pods", nil), c.err)
			if rec.Code != c.code || (rec.Header().Get("Retry-After") != "") != c.retryAfter {
				t.Errorf("answered %d, Retry-After %q; want %d, Retry-After set %v", rec.Code, rec.Header().Get("Retry-After"), c.code, c.retryAfter)
			}
			if body := rec.Body.String(); strings.Contains(body, "secret") || strings.Contains(body, "refused") || strings.Contains(body, "administrator") {
				t.Errorf("the answer leaks the cause: %s", body)
			}
		})
	}
}

// A dispatch that fails after creating the pod deletes it again; the watch
// may see the pod come and go and mark the row lost before the submit
// records its failure. The row ends failed with the dispatch's reason (what
// the 502 said), not lost; a row that finished or was cancelled meanwhile
// keeps its state.
func TestFailedDispatchOverridesTheWatchsLost(t *testing.T) {
	for _, c := range []struct {
		meanwhile store.State
		want      store.State
	}{
		{store.StateLost, store.StateFailed},
		{store.StateCancelled, store.StateCancelled},
		{store.StateSucceeded, store.StateSucceeded},
	} {
		t.Run(string(c.meanwhile), func(t *testing.T) {
			f := newFixture(t)
			f.disp.dispatchErr = errors.New("create configmap: forbidden")
			f.disp.during = func(id string) {
				if _, err := f.st.TransitionWorkPod(t.Context(), id, store.Transition{From: store.LiveStates, To: c.meanwhile,
					Reason: "meanwhile", Finish: true}); err != nil {
					t.Error(err)
				}
			}
			w := f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"image":"busybox"}`})
			if w.Code != http.StatusBadGateway {
				t.Fatalf("submit: %d %s, want 502", w.Code, w.Body)
			}
			rows, err := f.st.ListWorkPods(t.Context(), store.Filter{})
			if err != nil || len(rows) != 1 {
				t.Fatalf("rows %+v, %v; want one", rows, err)
			}
			if got := rows[0]; got.State != c.want || (c.want == store.StateFailed) != strings.HasPrefix(got.Reason, "dispatch: ") {
				t.Errorf("row %s (%q), want %s with the dispatch's reason only if failed", got.State, got.Reason, c.want)
			}
		})
	}
}
