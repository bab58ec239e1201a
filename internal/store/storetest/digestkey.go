package storetest

import (
	"bytes"
	"sync"
	"testing"

	"crucible.dev/crucible/internal/store"
)

// testDigestKey: the first call makes a key of DigestKeyBytes, not all
// zero, and every later call returns that same key.
func testDigestKey(t *testing.T, s store.Store) {
	first, err := s.DigestKey(t.Context())
	if err != nil {
		t.Fatalf("first digest key: %v", err)
	}
	if len(first) != store.DigestKeyBytes || bytes.Equal(first, make([]byte, store.DigestKeyBytes)) {
		t.Fatalf("digest key %x: want %d random bytes", first, store.DigestKeyBytes)
	}
	again, err := s.DigestKey(t.Context())
	if err != nil {
		t.Fatalf("second digest key: %v", err)
	}
	if !bytes.Equal(first, again) {
		t.Errorf("the digest key changed between calls: %x, then %x", first, again)
	}
}

// testDigestKeyConcurrent: callers racing the first call, as replicas
// starting together do, all get one key.
func testDigestKeyConcurrent(t *testing.T, s store.Store) {
	const n = 8
	keys := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k, err := s.DigestKey(t.Context())
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if !bytes.Equal(keys[0], keys[i]) {
			t.Errorf("caller %d got key %x, caller 0 %x", i, keys[i], keys[0])
		}
	}
}
