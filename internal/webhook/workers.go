package webhook

import (
	"context"
	"runtime"
)

// reviewWorkers run reviews on a few long-lived goroutines. HTTP/2 serves
// every request on a goroutine of its own, started with a small stack, and a
// review goes deep (go-oidc, go-jose, RSA): under the webhook benchmark the
// process spent 7 % of its CPU growing and copying those fresh stacks
// (runtime.morestack in a perf profile; issue 41), half of it with the
// reviews on workers. A worker's stack stays grown from one review to the
// next, as grpc-go's NumStreamWorkers keeps its streams'.
//
// A review goes to a worker only if one is idle and otherwise runs on its
// request's goroutine as before: the workers never queue a review, so one
// that waits (a key fetch for an unknown kid) holds up nothing but itself.
type reviewWorkers struct {
	jobs chan *reviewJob
}

type reviewJob struct {
	run  func()
	done chan struct{}
}

// newReviewWorkers starts a worker per CPU the scheduler runs goroutines on
// (a review is CPU-bound), until ctx ends.
func newReviewWorkers(ctx context.Context) *reviewWorkers {
	w := &reviewWorkers{jobs: make(chan *reviewJob)}
	for range runtime.GOMAXPROCS(0) {
		go w.work(ctx)
	}
	return w
}

func (w *reviewWorkers) work(ctx context.Context) {
	for {
		select {
		case j := <-w.jobs:
			j.run()
			close(j.done)
		case <-ctx.Done():
			return
		}
	}
}

// do runs fn on an idle worker, or on the caller's goroutine when none is
// idle, and returns once fn has.
func (w *reviewWorkers) do(fn func()) {
	j := &reviewJob{run: fn, done: make(chan struct{})}
	select {
	case w.jobs <- j:
		<-j.done
	default:
		fn()
	}
}
