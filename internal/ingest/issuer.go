package ingest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"crucible.dev/crucible/internal/jwt"
)

// clusterIssuer is the service-account issuer a cluster's discovery
// document names. A token of another issuer can never pass the cluster's
// TokenReview, and kube-apiserver words that refusal as status.error,
// which the drop-box must answer as an outage (503, retried, never
// cached); knowing the issuer lets it refuse such a token as what it is.
//
// It is learned with the keys. A token naming another issuer makes it
// re-read the document (at most once per minRefresh), so a cluster whose
// issuer changed is not held to the one read before. While the document
// has never been read the issuer is unknown and refuses nothing: the
// TokenReview decides, as it did before issuers were compared.
type clusterIssuer struct {
	read       func(ctx context.Context) // reads the document, which learns its issuer
	minRefresh time.Duration
	now        func() time.Time

	value  atomic.Pointer[string] // nil while unknown
	flight singleflight.Group

	mu         sync.Mutex
	lastReread time.Time
}

func newClusterIssuer(read func(context.Context), minRefresh time.Duration, now func() time.Time) *clusterIssuer {
	if minRefresh <= 0 {
		minRefresh = jwt.DefaultMinRefresh
	}
	return &clusterIssuer{read: read, minRefresh: minRefresh, now: now}
}

// learn records the issuer a discovery document named.
func (c *clusterIssuer) learn(issuer string) {
	if issuer != "" {
		c.value.Store(&issuer)
	}
}

// refuses reports whether iss is known not to be the cluster's issuer.
func (c *clusterIssuer) refuses(ctx context.Context, iss string) bool {
	known := c.value.Load()
	if known == nil || *known == iss {
		return false
	}
	c.reread(ctx)
	return *c.value.Load() != iss
}

// reread reads the discovery document again unless the last re-read is
// younger than minRefresh. Concurrent callers share one read, detached from
// their cancellation as the key set's refreshes are; a failed read keeps
// the issuer known before (keyFetcher logs it).
func (c *clusterIssuer) reread(ctx context.Context) {
	ch := c.flight.DoChan("reread", func() (any, error) {
		c.mu.Lock()
		now := c.now()
		if !c.lastReread.IsZero() && now.Sub(c.lastReread) < c.minRefresh {
			c.mu.Unlock()
			return nil, nil
		}
		c.lastReread = now
		c.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		defer cancel()
		c.read(rctx)
		return nil, nil
	})
	select {
	case <-ch:
	case <-ctx.Done():
	}
}
