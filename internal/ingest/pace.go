package ingest

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"crucible.dev/crucible/internal/httperr"
)

// pacedBody reads a request body at no less than a minimum rate. The
// external listener has no whole-request read timeout (a 64 MiB artifact
// over a slow link takes minutes); instead the body must bring minBytes
// within every window: each time it has, the connection's read deadline is
// pushed one window on. A stalled or trickling client hits the deadline and
// its read fails with a timeout (408), a client that hung up with another
// error (400); err remembers which, to tell either from a failing disk.
type pacedBody struct {
	r        io.Reader
	rc       *http.ResponseController
	minBytes int64
	window   time.Duration

	started bool
	got     int64 // since the deadline was last pushed
	err     error // the first read error other than io.EOF
}

// pace wraps body with the handler's minimum rate. Without a connection
// to set deadlines on (a ResponseRecorder in tests) it only records errors.
func (h *Handler) pace(rc *http.ResponseController, body io.Reader) *pacedBody {
	minBytes := int64(float64(h.opts.MinUploadRate) * h.opts.UploadRateWindow.Seconds())
	return &pacedBody{r: body, rc: rc, minBytes: max(1, minBytes), window: h.opts.UploadRateWindow}
}

func (p *pacedBody) Read(b []byte) (int, error) {
	if !p.started { // the first read starts the clock: waiting for the lock does not count
		p.started = true
		p.push()
	}
	n, err := p.r.Read(b)
	if p.got += int64(n); p.got >= p.minBytes {
		p.got = 0
		p.push()
	}
	switch {
	case err == io.EOF:
		p.stop()
	case err != nil && p.err == nil:
		p.err = err
	}
	return n, err
}

func (p *pacedBody) push() {
	_ = p.rc.SetReadDeadline(time.Now().Add(p.window)) // http.ErrNotSupported without a connection
}

// stop ends the pacing once the body is read (or given up). It clears the
// read deadline, so it cannot fire while the claim is recorded (the
// server's read of the idle connection would cancel the request's
// context), and gives the answer one window to be written from now: the
// listener's write timeout runs from the request's headers, which a slow
// upload (or a wait for the kind's lock) may have long outlived.
func (p *pacedBody) stop() {
	if p.started {
		_ = p.rc.SetReadDeadline(time.Time{})
	}
	_ = p.rc.SetWriteDeadline(time.Now().Add(p.window))
}

// timedOut reports whether reading stopped at the rate's deadline.
func (p *pacedBody) timedOut() bool {
	var ne net.Error
	return errors.Is(p.err, os.ErrDeadlineExceeded) || errors.As(p.err, &ne) && ne.Timeout()
}

// refusal answers a body that could not be read: 408 (retryable, and the
// connection is closed since the rest of the body is unread) when it was
// too slow, else 400.
func (p *pacedBody) refusal(err error) *httperr.Error {
	he := refuse(http.StatusBadRequest, "bad_request", "reading the body failed")
	if p.timedOut() {
		he = refuse(http.StatusRequestTimeout, "timeout", "upload too slow: the body must keep a minimum transfer rate")
	}
	he.Err = err
	return he.With("Connection", "close")
}
