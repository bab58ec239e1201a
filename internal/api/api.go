// Package api serves the controller's JSON API on the internal listener
// (R-C9): submit a work pod to a cluster, list/filter/get, cancel, artifacts,
// clusters with health. Every request passes the guard (auth.go) first: Host
// allowlist, CSRF and JSON-only checks, authentication and authorization
// (R-C12). Every error is JSON naming the bad field; what the client sees is
// kept apart from what is logged.
package api

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"crucible.dev/crucible/internal/dispatch"
	podevents "crucible.dev/crucible/internal/events"
	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/live"
	"crucible.dev/crucible/internal/store"
)

// Server holds what the handlers need.
type Server struct {
	Profile    *fleet.Profile
	Store      store.Store
	Dispatcher *dispatch.Dispatcher
	Clients    *fleet.Clients
	Artifacts  ArtifactReader
	Uploads    Uploads // told when a pod is cancelled (default: nobody)
	Log        *slog.Logger
	// MaxRequestBytes bounds request bodies (413 beyond).
	MaxRequestBytes int64
	// DispatchTimeout bounds one submit's work on the spoke.
	DispatchTimeout time.Duration
	// Authn and Authz decide who may call; nil: anonymous and allow all
	// (auth "none").
	Authn Authenticator
	Authz Authorizer
	// AuthMode is the profile's [api] auth, shown by GET /api/whoami.
	AuthMode string
	// AllowedHosts are the Host names (any port) the API answers.
	AllowedHosts []string
	// PageSize is GET /api/pods's page without ?limit (and at most
	// fleet.MaxAPIPageSize with it).
	PageSize int
	// Live shares pods' live log streams; nil: made on first use (logs.go).
	Live     *live.Hub
	liveOnce sync.Once
	// Events feeds GET /api/events; the controller publishes every row
	// change into it (events.Store). nil: a bus nobody publishes to.
	Events     *podevents.Bus
	eventsOnce sync.Once
}

// Routes registers the API on mux.
func (s *Server) Routes(mux *http.ServeMux) {
	mux.Handle("POST /api/pods", s.handle(s.submit))
	mux.Handle("GET /api/pods", s.handle(s.list))
	mux.Handle("GET /api/pods/{pod}", s.handle(s.get))
	mux.Handle("POST /api/pods/{pod}/cancel", s.handle(s.cancel))
	mux.Handle("GET /api/pods/{pod}/logs", s.handle(s.logs))
	mux.Handle("GET /api/pods/{pod}/artifacts", s.handle(s.listArtifacts))
	mux.Handle("GET /api/pods/{pod}/artifacts/{kind}", s.handle(s.getArtifact))
	mux.Handle("GET /api/clusters", s.handle(s.clusters))
	mux.Handle("GET /api/events", s.handle(s.watchEvents))
	mux.Handle("GET /api/whoami", s.handle(s.whoami))
	mux.Handle("/api/", s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return &Error{Code: http.StatusNotFound, Msg: "no such endpoint: " + r.Method + " " + r.URL.Path}
	}))
}

// Error is an HTTP error: Code and Msg go to the client, Err only to the log.
type Error struct {
	Code  int
	Msg   string
	Field string
	Err   error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

type errorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// handle guards fn (auth.go) and turns its error into a JSON answer. Every
// state-changing request is logged with the caller's identity.
func (s *Server) handle(fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		r, err := s.guard(rec, r)
		if err == nil {
			err = fn(rec, r)
		}
		if err != nil {
			s.fail(rec, r, err)
		}
		if stateChanging(r.Method) {
			s.Log.Info("api change", "method", r.Method, "path", r.URL.Path, "user", identity(r).User, "code", rec.code)
		}
	})
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *Error
	switch {
	case errors.As(err, &he):
	case store.IsUnavailable(err):
		// The database restarting or out of connections: transient.
		he = &Error{Code: http.StatusServiceUnavailable, Msg: "the store is unavailable; retry later", Err: err}
	default:
		he = &Error{Code: http.StatusInternalServerError, Msg: "internal error", Err: err}
	}
	if he.Code >= 500 {
		s.Log.Error("api request failed", "method", r.Method, "path", r.URL.Path, "code", he.Code, "error", err)
	}
	if he.Code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	if he.Code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="crucible"`)
	}
	writeJSON(w, he.Code, errorBody{Error: he.Msg, Field: he.Field})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// decode reads a JSON body strictly: a size limit (413), unknown fields and
// trailing data are errors naming what was wrong.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &Error{Code: http.StatusUnsupportedMediaType, Msg: "Content-Type must be application/json, not " + ct}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.MaxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooBig):
			return &Error{Code: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("request body over %d bytes", tooBig.Limit)}
		case errors.As(err, &syntax):
			return &Error{Code: http.StatusBadRequest, Msg: fmt.Sprintf("malformed JSON at byte %d", syntax.Offset)}
		case errors.As(err, &typ):
			return &Error{Code: http.StatusBadRequest, Field: typ.Field, Msg: fmt.Sprintf("%s: must be %s, not %s", typ.Field, typ.Type, typ.Value)}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return &Error{Code: http.StatusBadRequest, Field: field, Msg: "unknown field " + field}
		default:
			return &Error{Code: http.StatusBadRequest, Msg: "unreadable JSON body", Err: err}
		}
	}
	if dec.More() {
		return &Error{Code: http.StatusBadRequest, Msg: "trailing data after the JSON object"}
	}
	return nil
}

// newID makes a work pod's id, which is also its pod's name on the spoke.
func newID(kind string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return kind + "-" + string(b)
}

func notFound(what string) error {
	return &Error{Code: http.StatusNotFound, Msg: what + " not found"}
}

func detach(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}
