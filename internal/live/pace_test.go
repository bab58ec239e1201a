package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"crucible.dev/crucible/internal/profile"
)

// floodSource is a running pod that prints 1 KiB lines as fast as it is
// read, counting what its reader took: the bytes the spoke would send.
type floodSource struct{ read atomic.Int64 }

func (f *floodSource) Status(context.Context) (Status, error) { return Status{Started: true}, nil }

func (f *floodSource) Open(ctx context.Context, _ time.Time, _ bool) (io.ReadCloser, error) {
	return io.NopCloser(&floodReader{ctx: ctx, f: f}), nil
}

type floodReader struct {
	ctx  context.Context
	f    *floodSource
	n    int
	line []byte
}

func (r *floodReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	if len(r.line) == 0 {
		r.n++
		ts := time.Unix(1700000000, int64(r.n)).UTC().Format(time.RFC3339Nano)
		text := fmt.Sprintf("%08d %s", r.n, strings.Repeat("x", 1000))
		r.line = []byte(ts + " " + text + "\n")
	}
	n := copy(b, r.line)
	r.line = r.line[n:]
	r.f.read.Add(int64(n))
	return n, nil
}

// A pod flooding its log is read upstream no faster than ReadRate (plus
// the pacer's burst and the line reader's buffer), however fast it prints,
// while its viewer still gets its lines in order. The bound is an upper
// one: a slow machine only reads less.
func TestStreamReadsUpstreamAtTheReadRate(t *testing.T) {
	const readRate = 64 << 10
	f := &floodSource{}
	d := profile.Default().Live
	h, err := NewHub(func(Key) Source { return f }, Options{Buffer: d.Buffer, BufferBytes: d.ViewerBufferBytes,
		History: d.History, HistoryBytes: d.HistoryBytes, ReadRate: readRate, Poll: 10 * time.Millisecond, Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v := h.Subscribe(key, 0)
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const lines = 200 // about 200 KiB: three seconds at the rate
	for want := int64(1); want <= lines; want++ {
		l, err := v.Next(ctx)
		if err != nil {
			t.Fatalf("line %d: %v", want, err)
		}
		if l.N != want || !strings.HasPrefix(l.Text, fmt.Sprintf("%08d ", want)) {
			t.Fatalf("line %d is %d %.20q", want, l.N, l.Text)
		}
	}
	elapsed := time.Since(start)
	const burst = readRate / 8
	const slack = burst + 32<<10 + burst // the burst, the line reader's buffer, one paced read
	if got, most := f.read.Load(), int64(elapsed.Seconds()*readRate)+slack; got > most {
		t.Errorf("read %d bytes upstream in %s, more than %d at %d B/s", got, elapsed.Round(time.Millisecond), most, readRate)
	}
}

// A paced read waiting for the limiter ends with its context, returning
// what it read with the context's error: a viewer leaving is never held up
// by the pace.
func TestPacedReaderEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pacedReader{ctx: ctx, r: strings.NewReader(strings.Repeat("y", 100)), lim: newPacer(10)}
	b := make([]byte, 100)
	if n, err := p.Read(b); n != 10 || err != nil { // the burst: at so low a rate, a second's worth, at once
		t.Fatalf("first read = %d, %v; want 10, nil", n, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Read(b) // 10 more bytes: a second's wait
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("read during the wait = %v, want context.Canceled", err)
	}
}

// The pacer's burst is an eighth of a second at the rate, so that a pod
// starting to flood gets little at once, but never less than a short
// line's 4 KiB unless the rate itself is lower.
func TestPacerBurst(t *testing.T) {
	for _, tt := range []struct{ rate, burst int64 }{
		{profile.DefaultLiveReadBytesPerSecond, 128 << 10},
		{64 << 10, 8 << 10},
		{16 << 10, 4 << 10},
		{4 << 10, 4 << 10},
		{10, 10},
		{1, 1},
		{1 << 40, 1 << 30},
	} {
		lim := newPacer(tt.rate)
		if got := int64(lim.Burst()); got != tt.burst {
			t.Errorf("newPacer(%d).Burst() = %d, want %d", tt.rate, got, tt.burst)
		}
		if got := float64(lim.Limit()); got != float64(tt.rate) {
			t.Errorf("newPacer(%d).Limit() = %v, want the rate", tt.rate, got)
		}
	}
}
