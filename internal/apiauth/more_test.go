package apiauth

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"

	"crucible.dev/crucible/internal/metrics"
)

// blockingTokens answers only when released, counting reviews.
type blockingTokens struct {
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (b *blockingTokens) ReviewToken(context.Context, string) (authenticationv1.TokenReviewStatus, error) {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
	<-b.release
	return authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}, nil
}

// TestBearerCoalesces: many requests with one uncached token cost one review.
func TestBearerCoalesces(t *testing.T) {
	rev := &blockingTokens{release: make(chan struct{})}
	b := NewBearer(rev, time.Minute, time.Minute, 10)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := b.Authenticate(bearerRequest("Bearer same"))
			errs <- err
		})
	}
	// Wait until the first review is in flight, then let it answer.
	for {
		rev.mu.Lock()
		c := rev.calls
		rev.mu.Unlock()
		if c > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(rev.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if rev.calls != 1 {
		// Requests arriving after the first answer is cached never review,
		// and neither does one that missed the cache just before it was
		// stored: its flight finds the answer.
		t.Errorf("%d reviews for %d concurrent requests with one token", rev.calls, n)
	}
}

func TestReviewMetrics(t *testing.T) {
	hits := testutil.ToFloat64(metrics.APIAuthCacheHits.WithLabelValues("tokenreview", "allowed"))
	reviews := testutil.ToFloat64(metrics.APIAuthReviews.WithLabelValues("tokenreview", "allowed"))
	errs := testutil.ToFloat64(metrics.APIAuthReviews.WithLabelValues("tokenreview", "error"))
	rev := &fakeTokens{users: map[string]authenticationv1.UserInfo{"good": {Username: "alice"}}}
	b := NewBearer(rev, time.Minute, time.Minute, 10)
	for range 3 {
		if _, err := b.Authenticate(bearerRequest("Bearer good")); err != nil {
			t.Fatal(err)
		}
	}
	rev.err = context.DeadlineExceeded
	_, _ = b.Authenticate(bearerRequest("Bearer other"))
	if d := testutil.ToFloat64(metrics.APIAuthReviews.WithLabelValues("tokenreview", "allowed")) - reviews; d != 1 {
		t.Errorf("allowed reviews +%v, want +1", d)
	}
	if d := testutil.ToFloat64(metrics.APIAuthCacheHits.WithLabelValues("tokenreview", "allowed")) - hits; d != 2 {
		t.Errorf("cache hits +%v, want +2", d)
	}
	if d := testutil.ToFloat64(metrics.APIAuthReviews.WithLabelValues("tokenreview", "error")) - errs; d != 1 {
		t.Errorf("error reviews +%v, want +1", d)
	}
}

// FuzzBearerToken: whatever the header, BearerToken never panics, and what
// it accepts is a bounded run of printable ASCII without spaces.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x", "Basic abc", "Bearer", "", "Bearer \x00", "Bearer tökén", "BEARER a.b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set("Authorization", v)
		tok, err := BearerToken(h)
		if err != nil {
			return
		}
		if tok == "" || len(tok) > MaxTokenBytes || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			t.Errorf("accepted %q", tok)
		}
	})
}

// A caller that leaves while its coalesced review waits on a blocked hub
// returns at once, unavailable; the callers still waiting on the same review
// get its answer once the hub answers, and the review is not cancelled by the
// first caller's leaving.
func TestBearerCallerThatLeavesStopsWaiting(t *testing.T) {
	rev := &blockingTokens{release: make(chan struct{})}
	b := NewBearer(rev, time.Minute, time.Minute, 10)
	ctx, leave := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() {
		_, err := b.Authenticate(bearerRequest("Bearer same").WithContext(ctx))
		gone <- err
	}()
	for rev.count() == 0 {
		time.Sleep(time.Millisecond)
	}
	stayed := make(chan Identity, 2)
	for range 2 {
		go func() {
			id, err := b.Authenticate(bearerRequest("Bearer same"))
			if err != nil {
				t.Errorf("a caller that stayed: %v", err)
			}
			stayed <- id
		}()
	}
	leave()
	select {
	case err := <-gone:
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Errorf("the caller that left got %v, want ErrUnavailable wrapping context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller that left is still waiting for the blocked hub")
	}
	close(rev.release)
	for range 2 {
		if id := <-stayed; id.User != "alice" {
			t.Errorf("a caller that stayed got %+v, want alice", id)
		}
	}
	if n := rev.count(); n != 1 {
		t.Errorf("%d reviews, want the one all three shared", n)
	}
}

func (b *blockingTokens) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}
