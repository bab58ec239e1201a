package mirror

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

const (
	discoveryPath = "/.well-known/openid-configuration"
	jwksPath      = "/openid/v1/jwks"

	// maxDocumentSize bounds what is read from the hub API. Real documents
	// are a few KiB; anything near this is not a document worth serving.
	maxDocumentSize = 256 << 10
)

// errInvalid marks an upstream answer that is not a usable document, as
// opposed to no answer at all.
var errInvalid = errors.New("invalid upstream answer")

// document is one of the two upstream documents the mirror serves.
type document struct {
	name        string // metric and log label
	path        string // on the mirror and on the hub API
	accept      string // Accept header sent upstream
	contentType string // Content-Type served
	// prepare validates an upstream body and returns what the mirror serves.
	prepare func(body []byte) ([]byte, error)
}

func discoveryDocument(jwksURI string) document {
	return document{
		name:        "discovery",
		path:        discoveryPath,
		accept:      "application/json",
		contentType: "application/json",
		prepare:     func(body []byte) ([]byte, error) { return rewriteDiscovery(body, jwksURI) },
	}
}

func jwksDocument() document {
	return document{
		name:        "jwks",
		path:        jwksPath,
		accept:      "application/jwk-set+json, application/json",
		contentType: "application/jwk-set+json",
		prepare:     checkJWKS,
	}
}

// rewriteDiscovery points jwks_uri at the mirror and keeps every other field
// as the hub sent it. The issuer in particular stays byte for byte: consumers
// compare it with the tokens' iss claim.
func rewriteDiscovery(body []byte, jwksURI string) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("discovery is not a JSON object: %w", err)
	}
	for _, field := range []string{"issuer", "jwks_uri"} {
		var s string
		if err := json.Unmarshal(doc[field], &s); err != nil || s == "" {
			return nil, fmt.Errorf("discovery has no %s string", field)
		}
	}
	uri, err := json.Marshal(jwksURI)
	if err != nil {
		return nil, fmt.Errorf("encode jwks_uri: %w", err)
	}
	doc["jwks_uri"] = uri
	return encodeJSON(doc)
}

// encodeJSON encodes v without HTML escaping, which would rewrite '<', '>'
// and '&' inside passed-through strings.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) //nolint:forbidigo // a document to serve later, not an answer; json.Marshal cannot skip the escaping
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return buf.Bytes(), nil
}

// checkJWKS requires a non-empty keys array of objects and serves the body
// unchanged. An empty key set is refused: an issuer that signs tokens always
// publishes a key, so an empty set is an upstream fault that must not evict
// the last good keys.
func checkJWKS(body []byte) ([]byte, error) {
	var set struct {
		Keys *[]map[string]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("jwks is not a JSON object with a keys array of objects: %w", err)
	}
	if set.Keys == nil || len(*set.Keys) == 0 {
		return nil, errors.New("jwks has no keys")
	}
	for i, key := range *set.Keys {
		if key == nil {
			return nil, fmt.Errorf("jwks key %d is null", i)
		}
	}
	return body, nil
}

// statusError is a non-200 answer from the hub API.
type statusError struct{ code int }

func (e statusError) Error() string { return fmt.Sprintf("upstream answered status %d", e.code) }

// fetch gets d from the hub API: the body as the hub sent it (what a
// Keeper keeps, so a restore prepares it for the mirror of then) and what
// the mirror serves. Errors wrapping errInvalid mean the hub answered with
// something unusable.
//
// A 401 is asked again once, at once. The controller's hub client
// (fleet.TokenFileConfig) re-reads its token file after a 401, so the
// second request carries the token the kubelet rotated in; failing the
// fetch instead would back off for retryBackoff after every rotation that
// revoked the old token, serving a stale copy meanwhile, or a 503 when
// that copy is past max_stale. A token the hub refuses twice is a failure.
func (m *Mirror) fetch(ctx context.Context, d document) (raw, served []byte, err error) {
	resp, err := m.get(ctx, d)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		discard(resp)
		resp, err = m.get(ctx, d)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get %s: %w", d.path, err)
	}
	if resp.StatusCode != http.StatusOK {
		discard(resp)
		return nil, nil, fmt.Errorf("%w: %w", errInvalid, statusError{resp.StatusCode})
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", d.path, err)
	}
	if len(body) > maxDocumentSize {
		return nil, nil, fmt.Errorf("%w: larger than %d bytes", errInvalid, maxDocumentSize)
	}
	out, err := d.prepare(body)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errInvalid, err)
	}
	return body, out, nil
}

// get sends one request for d to the hub API.
func (m *Mirror) get(ctx context.Context, d document) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.upstreamURL+d.path, nil)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", d.accept)
	return m.upstream.Do(req)
}

// discard reads what is left of an answer not used, up to the size bound,
// so that its connection can carry the next request, and closes it.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDocumentSize))
	resp.Body.Close()
}
