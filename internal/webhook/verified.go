package webhook

import (
	"context"
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
// When full it drops the least recently used acceptance (lru.Cache): under
// a flood of distinct valid tokens, the tokens the API servers keep asking
// about stay cached.
type verifiedCache struct {
	now     func() time.Time
	maxAge  time.Duration
	entries *lru.Cache[outcome]
	hits    atomic.Int64
	misses  atomic.Int64
}

func newVerifiedCache(size int, maxAge time.Duration, now func() time.Time) *verifiedCache {
	return &verifiedCache{now: now, maxAge: maxAge, entries: lru.New[outcome](size)}
}

// get returns the cached acceptance of the token with this key.
func (c *verifiedCache) get(key string) (outcome, bool) {
	out, ok := c.entries.Get(key, c.now())
	if !ok {
		c.misses.Add(1)
		return outcome{}, false
	}
	c.hits.Add(1)
	return out, true
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
	c.entries.Put(key, out, until)
}

// len is the number of entries, expired ones not yet read included.
func (c *verifiedCache) len() int { return c.entries.Len() }

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
