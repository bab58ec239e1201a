package lru

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// A token's key is stable within the process, differs between tokens, is
// not the token's plain SHA-256 (which would be the same in every process),
// and never contains the token.
func TestTokenKey(t *testing.T) {
	a, b := TokenKey("token-a"), TokenKey("token-b")
	if a != TokenKey("token-a") {
		t.Error("the key of one token changed within the process")
	}
	if a == b {
		t.Error("two tokens share a key")
	}
	plain := sha256.Sum256([]byte("token-a"))
	if a == hex.EncodeToString(plain[:]) {
		t.Error("the key is the token's plain SHA-256: not keyed per process")
	}
	if len(a) != 64 {
		t.Errorf("key %q is %d characters, want 64 hex", a, len(a))
	}
	if _, err := hex.DecodeString(a); err != nil {
		t.Errorf("key %q is not hex: %v", a, err)
	}
}

// BenchmarkTokenKey keys a projected-token-sized token, as every review,
// upload and API request does once.
func BenchmarkTokenKey(b *testing.B) {
	token := strings.Repeat("eyJhbGciOiJSUzI1NiJ9.", 50)
	b.ReportAllocs()
	for b.Loop() {
		_ = TokenKey(token)
	}
}
