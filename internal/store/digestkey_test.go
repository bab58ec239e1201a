package store_test

import (
	"bytes"
	"sync"
	"testing"

	"crucible.dev/crucible/internal/store"
)

// TestDigestKeyAcrossOpens: the key made by one store is the key of every
// other store on the same database: stores opened together (replicas
// starting at once, each making a key if it sees none) and one opened
// after they closed (a restart).
func TestDigestKeyAcrossOpens(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			dsn, _ := b.fresh(t)
			const n = 4
			keys := make([][]byte, n+1)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { keys[i] = openDigestKey(t, dsn) })
			}
			wg.Wait()
			keys[n] = openDigestKey(t, dsn)
			for i := 1; i <= n; i++ {
				if keys[i] == nil || !bytes.Equal(keys[0], keys[i]) {
					t.Errorf("store %d has key %x, store 0 %x", i, keys[i], keys[0])
				}
			}
		})
	}
}

// openDigestKey opens dsn, reads its digest key and closes it; nil (and the
// test failed) when it cannot.
func openDigestKey(t *testing.T, dsn string) []byte {
	s, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Errorf("open: %v", err)
		return nil
	}
	defer s.Close()
	key, err := s.DigestKey(t.Context())
	if err != nil {
		t.Errorf("digest key: %v", err)
	}
	return key
}
