package httperr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

const jsonContentType = "application/json"

// nosniff and jsonContentTypes are header values shared by every answer:
// Header.Set would allocate them per request, and the webhook answers
// TokenReviews on its hot path. Their one element fills their capacity, so
// an Add elsewhere copies rather than writes into them.
var (
	nosniff          = []string{"nosniff"}
	jsonContentTypes = []string{jsonContentType}
)

// WriteBody is the one success writer: it answers code with data as
// contentType, with nosniff and a Content-Length, and no body for HEAD.
// Headers the edge set on w before are kept. Without a request (r nil) the
// body is written; net/http's server drops it for HEAD itself.
func WriteBody(w http.ResponseWriter, r *http.Request, code int, contentType string, data []byte) {
	h := w.Header()
	if contentType == jsonContentType {
		h["Content-Type"] = jsonContentTypes
	} else {
		h.Set("Content-Type", contentType)
	}
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h["X-Content-Type-Options"] = nosniff
	w.WriteHeader(code)
	if r == nil || r.Method != http.MethodHead {
		_, _ = w.Write(data)
	}
}

// WriteJSON answers code with v as JSON in format f (indented for JSON, on
// one line otherwise, escaped as the error bodies are) through WriteBody. A
// v that does not encode is returned with nothing written, so the handler
// returns it and its edge answers a 500 and logs why.
func WriteJSON(w http.ResponseWriter, r *http.Request, code int, v any, f Format) error {
	data, err := marshal(v, f)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	WriteBody(w, r, code, jsonContentType, data)
	return nil
}

// marshal encodes v as json.Encoder does (HTML-escaped, one trailing
// newline), indented by two spaces for JSON: the bytes every edge's clients
// have always read.
func marshal(v any, f Format) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if f == JSON {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
