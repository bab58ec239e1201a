package live

import (
	"context"
	"io"

	"golang.org/x/time/rate"
)

// pacedReader reads its upstream no faster than its limiter allows. Not
// reading is the backpressure: the bytes a pod floods its log with stay
// behind the connection's flow-control window on the spoke, instead of
// crossing to the controller only to be dropped at viewers far slower.
type pacedReader struct {
	ctx context.Context
	r   io.Reader
	lim *rate.Limiter
}

// newPacer is a stream's limiter: bytesPerSecond, with a second's worth of
// burst so that a quiet pod's lines pass without delay.
func newPacer(bytesPerSecond int64) *rate.Limiter {
	burst := int(min(bytesPerSecond, 1<<30))
	return rate.NewLimiter(rate.Limit(bytesPerSecond), burst)
}

// Read reads at most a burst, then waits until the limiter has allowed
// what it read. The wait ends early with ctx, whose error it returns with
// the bytes already read.
func (p *pacedReader) Read(b []byte) (int, error) {
	if burst := p.lim.Burst(); len(b) > burst {
		b = b[:burst]
	}
	n, err := p.r.Read(b)
	if n > 0 {
		if werr := p.lim.WaitN(p.ctx, n); werr != nil && err == nil {
			err = p.ctx.Err()
			if err == nil {
				err = werr
			}
		}
	}
	return n, err
}
