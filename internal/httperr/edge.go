package httperr

import (
	"errors"
	"net/http"
)

// HandlerFunc is the shape of every handler at an edge: it answers a
// success itself (WriteJSON, WriteBody, or a stream it starts) and returns
// what it refused or failed to do, for its Edge to answer. It checks
// method, auth and parameters before it writes a header, so a refusal is
// never appended to half an answer.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Edge is the one adapter between an edge's handlers and its clients: it
// answers their errors in the edge's Format, with the edge's default
// headers, after the edge has logged them, and tells the edge how every
// request ended. Nil hooks do nothing.
type Edge struct {
	Format Format
	// Guard runs before each handler (the API's Host, CSRF and identity
	// checks) and returns the request the handler, Log and Done see, with
	// what it learnt in its context: never nil, also when it refuses.
	Guard func(w http.ResponseWriter, r *http.Request) (*http.Request, error)
	// Classify answers an error with no *Error in its chain; a nil answer
	// (or a nil Classify) is From's fixed 500. The API answers a store
	// outage 503 this way, the drop-box every unclassified error.
	Classify func(err error) *Error
	// RetryAfter is the Retry-After of a 503 and Challenge the
	// WWW-Authenticate of a 401 whose *Error names none: a client told to
	// wait or to authenticate is always told how.
	RetryAfter, Challenge string
	// Log is told of every error answer before it is written, with the
	// error the handler returned. Whether the cause is logged, and how
	// loudly, is the edge's call: each has its own refusal budget.
	Log func(r *http.Request, he *Error, err error)
	// Done is told how every request ended, once it is answered: the status
	// written, and the *Error of an error answer (nil for a success). Edges
	// count their outcome metric and write their audit line here.
	Done func(r *http.Request, code int, he *Error)
}

// Handle is fn served at e.
func (e Edge) Handle(fn HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.Serve(w, r, fn) })
}

// Serve runs e's Guard and fn for one request, answers the error of either
// with Fail, and tells Done how it ended.
func (e Edge) Serve(w http.ResponseWriter, r *http.Request, fn HandlerFunc) {
	var sw *statusWriter
	if e.Done != nil { // only Done needs the status; the webhook's hot path has none
		sw = &statusWriter{ResponseWriter: w}
		w = sw
	}
	var err error
	if e.Guard != nil {
		r, err = e.Guard(w, r)
	}
	if err == nil {
		err = fn(w, r)
	}
	var he *Error
	if err != nil {
		he = e.answer(w, r, err)
	}
	if sw != nil {
		e.Done(r, sw.status(), he)
	}
}

// Fail answers err as e answers every error of its handlers, for a writer
// that has no handler to return it from (r may be nil where e has no Log).
func (e Edge) Fail(w http.ResponseWriter, r *http.Request, err error) { _ = e.answer(w, r, err) }

// answer classifies err, gives it e's default headers, has it logged, writes
// it with Write, and returns what it answered.
func (e Edge) answer(w http.ResponseWriter, r *http.Request, err error) *Error {
	he, ok := errors.AsType[*Error](err)
	if !ok && e.Classify != nil {
		he = e.Classify(err)
	}
	if he == nil {
		he = From(err)
	}
	h := w.Header() // he's own headers are set over these by Write
	if he.Code == http.StatusServiceUnavailable && e.RetryAfter != "" && h.Get("Retry-After") == "" {
		h.Set("Retry-After", e.RetryAfter)
	}
	if he.Code == http.StatusUnauthorized && e.Challenge != "" && h.Get("WWW-Authenticate") == "" {
		h.Set("WWW-Authenticate", e.Challenge)
	}
	if e.Log != nil {
		e.Log(r, he, err)
	}
	Write(w, r, he, e.Format)
	return he
}

// statusWriter remembers the status of an answer for Done. It passes only
// Unwrap through, so http.ResponseController reaches the server's writer
// for flushes (with their errors) and deadlines.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// status is what the client got: a handler that wrote nothing is answered
// 200 by net/http.
func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}
