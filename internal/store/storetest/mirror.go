package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/store"
)

// testMirrorDocuments: a kept document reads back with its fetch time to
// the nanosecond; a newer fetch replaces it, an older one (another
// replica's, late) does not; none kept is ErrNotFound; unknown names,
// empty and oversized bodies are refused and change nothing.
func testMirrorDocuments(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, _, err := s.MirrorDocument(ctx, "jwks"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("none kept: %v, want ErrNotFound", err)
	}
	at := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	keep := func(name, body string, at time.Time) {
		t.Helper()
		if err := s.KeepMirrorDocument(ctx, name, []byte(body), at); err != nil {
			t.Fatalf("keep %s: %v", name, err)
		}
	}
	read := func(name, wantBody string, wantAt time.Time) {
		t.Helper()
		body, got, err := s.MirrorDocument(ctx, name)
		if err != nil || string(body) != wantBody || !got.Equal(wantAt) {
			t.Errorf("%s: %q at %v, %v; want %q at %v", name, body, got, err, wantBody, wantAt)
		}
	}
	keep("jwks", `{"keys":[{"kid":"a"}]}`, at)
	keep("discovery", `{"issuer":"https://kubernetes.default.svc"}`, at)
	read("jwks", `{"keys":[{"kid":"a"}]}`, at)
	keep("jwks", `{"keys":[{"kid":"b"}]}`, at.Add(time.Minute))
	read("jwks", `{"keys":[{"kid":"b"}]}`, at.Add(time.Minute))
	keep("jwks", `{"keys":[{"kid":"late"}]}`, at.Add(30*time.Second))
	read("jwks", `{"keys":[{"kid":"b"}]}`, at.Add(time.Minute))
	read("discovery", `{"issuer":"https://kubernetes.default.svc"}`, at)

	for name, tc := range map[string]struct {
		doc  string
		body []byte
	}{
		"unknown name": {"keys", []byte(`{}`)},
		"empty body":   {"jwks", nil},
		"oversized":    {"jwks", []byte(strings.Repeat("x", store.MaxMirrorDocumentBytes+1))},
	} {
		if err := s.KeepMirrorDocument(ctx, tc.doc, tc.body, at.Add(time.Hour)); err == nil {
			t.Errorf("%s: kept, want a refusal", name)
		}
	}
	read("jwks", `{"keys":[{"kid":"b"}]}`, at.Add(time.Minute))
}
