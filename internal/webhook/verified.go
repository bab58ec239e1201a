package webhook

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"crucible.dev/crucible/internal/lru"
)

const (
	// defaultVerifiedCacheSize bounds the verified-token cache. A spoke's
	// API servers ask about the few tokens of one hub controller; the bound
	// only matters under a flood of distinct valid tokens.
	defaultVerifiedCacheSize = 1024
	// verifiedMaxAge bounds how long an acceptance is reused even when the
	// token lives longer, so a key the hub withdraws stops being honoured
	// soon after the webhook sees fresh keys (kube-apiserver itself caches
	// webhook answers for two minutes by default).
	verifiedMaxAge = time.Minute
)

// verifiedCache remembers recent acceptances by lru.TokenKey of the token, so
// the several API servers of one spoke asking about the same token cost one
// signature check. Only acceptances are stored: a rejection or an error is
// always decided afresh. An entry is never used at or past the token's exp,
// nor past verifiedMaxAge; each configuration (snapshot) has its own cache,
// so a reload never serves acceptances of the previous configuration.
// Eviction is first in, first out: a ring of keys as large as the cache.
type verifiedCache struct {
	now    func() time.Time
	maxAge time.Duration

	mu      sync.Mutex
	entries map[string]verifiedEntry
	ring    []ringSlot
	next    int    // ring slot the next insertion takes
	seq     uint64 // insertion counter; tells a slot's entry from a newer one
	hits    atomic.Int64
	misses  atomic.Int64
}

type verifiedEntry struct {
	out   outcome
	until time.Time
	seq   uint64
}

type ringSlot struct {
	key string
	seq uint64 // 0: empty
}

func newVerifiedCache(size int, maxAge time.Duration, now func() time.Time) *verifiedCache {
	return &verifiedCache{
		now: now, maxAge: maxAge,
		entries: make(map[string]verifiedEntry, size),
		ring:    make([]ringSlot, size),
	}
}

// get returns the cached acceptance of the token with this digest.
func (c *verifiedCache) get(key string) (outcome, bool) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[key]
	if ok && !now.Before(e.until) {
		delete(c.entries, key) // its ring slot is reclaimed by seq
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		c.misses.Add(1)
		return outcome{}, false
	}
	c.hits.Add(1)
	return e.out, true
}

// put stores out if it is an acceptance with an exp still ahead.
func (c *verifiedCache) put(key string, out outcome) {
	if out.result != resultAuthenticated || out.exp.IsZero() {
		return
	}
	now := c.now()
	until := now.Add(c.maxAge)
	if out.exp.Before(until) {
		until = out.exp
	}
	if !now.Before(until) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.ring[c.next]
	if e, ok := c.entries[old.key]; ok && old.seq != 0 && e.seq == old.seq {
		delete(c.entries, old.key)
	}
	c.seq++
	c.ring[c.next] = ringSlot{key: key, seq: c.seq}
	c.next = (c.next + 1) % len(c.ring)
	c.entries[key] = verifiedEntry{out: out, until: until, seq: c.seq}
}

// len is the number of entries, expired ones not yet dropped included.
func (c *verifiedCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// review answers a token from the verified-token cache, or authenticates it
// and encodes the answer's status once.
func (s *snapshot) review(ctx context.Context, token string) outcome {
	key := lru.TokenKey(token)
	if out, ok := s.verified.get(key); ok {
		return out
	}
	out := s.authenticate(ctx, token)
	out.status = encodeStatus(out)
	s.verified.put(key, out)
	return out
}
