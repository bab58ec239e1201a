package webhook

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestReviewWorkersNeverQueue: do returns only once its review has run;
// with every worker held (reviews waiting on a key fetch), the next review
// runs at once on its own goroutine, and so do reviews after the workers
// stopped.
func TestReviewWorkersNeverQueue(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := newReviewWorkers(ctx)

	ran := false
	w.do(func() { ran = true })
	if !ran {
		t.Fatal("do returned before its review ran")
	}

	release := make(chan struct{})
	for range runtime.GOMAXPROCS(0) {
		w.jobs <- &reviewJob{run: func() { <-release }, done: make(chan struct{})} // taken by a worker, which then waits
	}
	finishes := func(what string) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			w.do(func() {})
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}
	finishes("a review waited for a busy worker instead of running on its own goroutine")
	close(release)

	cancel()
	for range 100 { // whether or not the workers have seen ctx end yet
		finishes("a review blocked after the workers stopped")
	}
}
