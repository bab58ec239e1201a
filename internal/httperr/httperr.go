// Package httperr is how every edge (the API, the drop-box, the mirror, the
// authn webhook, the probes, the web UI) answers. Its Error is the one HTTP
// error: a status and a public message the client sees, optional response
// headers (Retry-After, Allow, WWW-Authenticate), an outcome label for the
// edge's metric, and an internal cause that only the edge's log sees.
// Keeping the cause out of the answer is the point: upstream and store
// errors carry hostnames, paths and SQL that an outsider must not read.
// tailscale's tsweb.HTTPError is the model.
//
// A handler returns its error; the edge's adapter (Edge) writes it, has it
// logged as the edge decides (each has its own refusal budget) and counted.
// Successes go through one writer too (WriteJSON, WriteBody), so every
// answer carries nosniff and a Content-Length and skips the body for HEAD.
// Each edge keeps its own body format (clients parse them): both writers
// take the edge's Format. Write and the success writers never log.
package httperr

import (
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"
)

// Error is a refused or failed request. Code, Msg, Field and Header go to
// the client; Outcome to the edge's metric; Err only to the log.
type Error struct {
	Code int
	// Msg is the public message: never built from an internal error's text.
	Msg string
	// Field names the request field at fault (JSON formats only).
	Field string
	// Header is set on the response before the status is written.
	Header http.Header
	// Outcome labels the answer in the edge's request metric (the
	// drop-box's outcome); empty where the edge counts none.
	Outcome string
	// Err is the internal cause, for the log.
	Err error
}

// New is a refusal without an internal cause.
func New(code int, msg string) *Error { return &Error{Code: code, Msg: msg} }

// Wrap is an answer with the internal cause err, which is logged, never sent.
func Wrap(code int, msg string, err error) *Error { return &Error{Code: code, Msg: msg, Err: err} }

// With sets a response header of e and returns e.
func (e *Error) With(key, value string) *Error {
	if e.Header == nil {
		e.Header = http.Header{}
	}
	e.Header.Set(key, value)
	return e
}

// Labeled sets the outcome label of e and returns e.
func (e *Error) Labeled(outcome string) *Error {
	e.Outcome = outcome
	return e
}

// Error is for logs: the status, the public message and the cause.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %v", e.Code, e.Msg, e.Err)
	}
	return fmt.Sprintf("%d %s", e.Code, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// InternalMessage is the public message of an error that is no *Error.
const InternalMessage = "internal error"

// From returns the *Error in err's chain, or a 500 with a fixed public
// message and err as its cause: an error nobody classified never reaches the
// client as text.
func From(err error) *Error {
	if he, ok := errors.AsType[*Error](err); ok {
		return he
	}
	return Wrap(http.StatusInternalServerError, InternalMessage, err)
}

// Format is how an edge writes its bodies: its errors, and the JSON of its
// successes (WriteJSON).
type Format int

const (
	// JSON is {"error": msg, "field": f} indented by two spaces, as the API
	// answers (the CLI and the web UI parse it); its successes are indented
	// too.
	JSON Format = iota
	// CompactJSON is {"error":"msg"} on one line, as the drop-box and the
	// mirror answer; so are its successes.
	CompactJSON
	// Text is the message as text/plain, as http.Error writes it (the authn
	// webhook, whose client is kube-apiserver, the probes and the web UI);
	// the JSON successes of such an edge (the webhook's /readyz) are on one
	// line.
	Text
)

// body is the JSON formats' error body.
type body struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// Write answers err in format f: From(err)'s headers, status and public
// message, written as WriteBody writes. Headers the edge set on w before are
// kept. Edges answer through Edge, which calls Write once it has logged.
func Write(w http.ResponseWriter, r *http.Request, err error, f Format) {
	he := From(err)
	data, contentType := encode(he, f)
	h := w.Header()
	for k, vs := range he.Header {
		h[k] = vs
	}
	WriteBody(w, r, he.Code, contentType, data)
}

// Body is the bytes Write sends for err in format f.
func Body(err error, f Format) []byte {
	data, _ := encode(From(err), f)
	return data
}

func encode(he *Error, f Format) ([]byte, string) {
	if f == Text {
		return []byte(he.Msg + "\n"), "text/plain; charset=utf-8"
	}
	b := body{Error: he.Msg}
	if f == JSON {
		b.Field = he.Field
	}
	data, _ := marshal(b, f) // two strings always encode
	return data, jsonContentType
}

// Truncate shortens a string quoted in a public message (a client's input,
// a spoke's status text) to n bytes, on a rune boundary, marked with "…":
// an answer never grows with what it quotes.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
