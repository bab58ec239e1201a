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

// newPacer is a stream's limiter: bytesPerSecond, with an eighth of a
// second's worth of burst (at least 4 KiB, or the whole rate when it is
// smaller). The burst lets a quiet pod's lines pass without delay; kept
// small, it is also all a pod that starts flooding gets at once: a whole
// second's worth, handed to a hundred viewers together, costs the
// controller a stall that other pods' lines wait out (issue 41's abuse
// row measured 100-400 ms of it at a flood's start).
func newPacer(bytesPerSecond int64) *rate.Limiter {
	burst := max(bytesPerSecond/8, min(bytesPerSecond, minBurst))
	return rate.NewLimiter(rate.Limit(bytesPerSecond), int(min(burst, 1<<30)))
}

// minBurst is the least burst a pacer allows, when the rate allows it: a
// short line's bytes at once.
const minBurst = 4 << 10

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
