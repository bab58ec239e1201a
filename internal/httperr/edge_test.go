package httperr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// seen is what an edge's hooks were told about one request.
type seen struct {
	Logged     bool
	LogCode    int
	LogErr     string
	DoneCode   int
	DoneErr    bool
	DoneCaller string
}

type callerKey struct{}

func TestEdge(t *testing.T) {
	secret := errors.New("dial tcp 10.0.0.7:6443: secret-internal-detail")
	transient := errors.New("connection refused")
	tests := []struct {
		name       string
		guard      error
		handler    func(w http.ResponseWriter, r *http.Request) error
		wantCode   int
		wantBody   string
		wantHeader http.Header // only these keys are compared
		want       seen
	}{
		{name: "success is not logged",
			handler: func(w http.ResponseWriter, r *http.Request) error {
				return WriteJSON(w, r, http.StatusCreated, map[string]int{"n": 1}, CompactJSON)
			},
			wantCode: 201, wantBody: `{"n":1}` + "\n",
			want: seen{DoneCode: 201, DoneCaller: "alice"}},
		{name: "a handler that writes nothing is a 200",
			handler:  func(http.ResponseWriter, *http.Request) error { return nil },
			wantCode: 200, want: seen{DoneCode: 200, DoneCaller: "alice"}},
		{name: "refusal, wrapped: the handler's error is logged, the public message sent",
			handler: func(http.ResponseWriter, *http.Request) error {
				return fmt.Errorf("update row: %w", Wrap(http.StatusConflict, "work pod p is already failed", secret))
			},
			wantCode: 409, wantBody: `{"error":"work pod p is already failed"}` + "\n",
			want: seen{Logged: true, LogCode: 409, LogErr: "update row: 409 work pod p is already failed: " + secret.Error(),
				DoneCode: 409, DoneErr: true, DoneCaller: "alice"}},
		{name: "classified: a 503 is told when to retry",
			handler:  func(http.ResponseWriter, *http.Request) error { return fmt.Errorf("list: %w", transient) },
			wantCode: 503, wantBody: `{"error":"retry later"}` + "\n", wantHeader: http.Header{"Retry-After": {"5"}},
			want: seen{Logged: true, LogCode: 503, LogErr: "list: connection refused", DoneCode: 503, DoneErr: true, DoneCaller: "alice"}},
		{name: "a 503's own Retry-After wins",
			handler: func(http.ResponseWriter, *http.Request) error {
				return New(http.StatusServiceUnavailable, "busy").With("Retry-After", "60")
			},
			wantCode: 503, wantHeader: http.Header{"Retry-After": {"60"}}, wantBody: `{"error":"busy"}` + "\n",
			want: seen{Logged: true, LogCode: 503, LogErr: "503 busy", DoneCode: 503, DoneErr: true, DoneCaller: "alice"}},
		{name: "unclassified: the fixed 500, never the cause",
			handler:  func(http.ResponseWriter, *http.Request) error { return secret },
			wantCode: 500, wantBody: `{"error":"internal error"}` + "\n",
			want: seen{Logged: true, LogCode: 500, LogErr: secret.Error(), DoneCode: 500, DoneErr: true, DoneCaller: "alice"}},
		{name: "a 401 is told how to authenticate",
			handler:  func(http.ResponseWriter, *http.Request) error { return New(http.StatusUnauthorized, "unauthorized") },
			wantCode: 401, wantHeader: http.Header{"Www-Authenticate": {"Bearer"}}, wantBody: `{"error":"unauthorized"}` + "\n",
			want: seen{Logged: true, LogCode: 401, LogErr: "401 unauthorized", DoneCode: 401, DoneErr: true, DoneCaller: "alice"}},
		{name: "a guard's refusal: no handler, its request still seen",
			guard: New(http.StatusForbidden, "forbidden"),
			handler: func(http.ResponseWriter, *http.Request) error {
				t.Error("handler ran after the guard refused")
				return nil
			},
			wantCode: 403, wantBody: `{"error":"forbidden"}` + "\n",
			want: seen{Logged: true, LogCode: 403, LogErr: "403 forbidden", DoneCode: 403, DoneErr: true, DoneCaller: "alice"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got seen
			e := recordingEdge(tc.guard, transient, &got)
			w := httptest.NewRecorder()
			e.Handle(tc.handler).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil))
			if w.Code != tc.wantCode || w.Body.String() != tc.wantBody {
				t.Fatalf("got %d %q, want %d %q", w.Code, w.Body, tc.wantCode, tc.wantBody)
			}
			if strings.Contains(w.Body.String(), "secret") {
				t.Errorf("the answer leaks the cause: %s", w.Body)
			}
			for k, want := range tc.wantHeader {
				if diff := cmp.Diff(want, w.Header()[k]); diff != "" {
					t.Errorf("%s (-want +got):\n%s", k, diff)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hooks (-want +got):\n%s", diff)
			}
		})
	}
}

// recordingEdge is an edge with every hook, which notes in got what it was
// told; its guard names the caller and answers guardErr, and it classifies
// transient as a 503.
func recordingEdge(guardErr, transient error, got *seen) Edge {
	return Edge{
		Format: CompactJSON,
		Guard: func(_ http.ResponseWriter, r *http.Request) (*http.Request, error) {
			return r.WithContext(context.WithValue(r.Context(), callerKey{}, "alice")), guardErr
		},
		Classify: func(err error) *Error {
			if errors.Is(err, transient) {
				return Wrap(http.StatusServiceUnavailable, "retry later", err)
			}
			return nil
		},
		RetryAfter: "5",
		Challenge:  "Bearer",
		Log: func(_ *http.Request, he *Error, err error) {
			got.Logged, got.LogCode, got.LogErr = true, he.Code, err.Error()
		},
		Done: func(r *http.Request, code int, he *Error) {
			got.DoneCode, got.DoneErr = code, he != nil
			got.DoneCaller, _ = r.Context().Value(callerKey{}).(string)
		},
	}
}

// A stream started behind an edge that counts still reaches the server's
// writer for flushes: the status recorder passes Unwrap through.
func TestEdgeStreamFlushes(t *testing.T) {
	var code int
	e := Edge{Format: JSON, Done: func(_ *http.Request, c int, _ *Error) { code = c }}
	w := httptest.NewRecorder()
	e.Serve(w, httptest.NewRequest(http.MethodGet, "/x", nil), func(w http.ResponseWriter, _ *http.Request) error {
		if _, ok := w.(http.Flusher); ok {
			t.Error("the recorder is a Flusher itself: it would hide flush errors")
		}
		w.WriteHeader(http.StatusAccepted)
		return http.NewResponseController(w).Flush()
	})
	if !w.Flushed || code != http.StatusAccepted {
		t.Errorf("flushed %v, Done told %d; want flushed and 202", w.Flushed, code)
	}
}
