package devstack

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// A pod's output is kept as the kubelet keeps it: one CRI-format record per
// line, "<RFC3339Nano> <stream> <tag> <text>", tag F for a full line and P for
// a part of one (a line longer than maxRecord, or the last bytes before EOF
// without a newline). The log server reads the records back.

// maxRecord is the longest text of one record, as containerd's default.
const maxRecord = 16 << 10

// criLog is the log file of one container, written by its stdout and stderr
// copiers and followed by any number of readers.
type criLog struct {
	path string

	mu     sync.Mutex
	f      *os.File
	notify chan struct{} // closed and replaced on every append
	open   int           // streams still being copied
	now    func() time.Time
}

func newCRILog(path string) (*criLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create pod log: %w", err)
	}
	return &criLog{path: path, f: f, notify: make(chan struct{}), now: time.Now}, nil
}

// copy copies r into the log as stream ("stdout" or "stderr") until EOF. Call
// expect(n) before starting n copiers, so followers wait for all of them.
func (l *criLog) copy(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxRecord)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			l.append(stream, 'F', line[:len(line)-1])
			continue
		case errors.Is(err, bufio.ErrBufferFull):
			l.append(stream, 'P', line)
			continue
		}
		if len(line) > 0 {
			l.append(stream, 'P', line)
		}
		break
	}
	l.mu.Lock()
	l.open--
	if l.open == 0 {
		_ = l.f.Close()
	}
	l.wake()
	l.mu.Unlock()
}

func (l *criLog) expect(n int) {
	l.mu.Lock()
	l.open += n
	l.mu.Unlock()
}

// abandon closes a log whose copiers never started.
func (l *criLog) abandon() {
	l.mu.Lock()
	if l.open == 0 {
		_ = l.f.Close()
	}
	l.open = 0
	l.wake()
	l.mu.Unlock()
}

func (l *criLog) append(stream string, tag byte, text []byte) {
	rec := make([]byte, 0, len(text)+48)
	rec = l.now().UTC().AppendFormat(rec, time.RFC3339Nano)
	rec = append(rec, ' ')
	rec = append(rec, stream...)
	rec = append(rec, ' ', tag, ' ')
	rec = append(rec, text...)
	rec = append(rec, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(rec) // one write per record: readers never see half of one
	l.wake()
}

// wake tells followers there is more; l.mu is held.
func (l *criLog) wake() {
	close(l.notify)
	l.notify = make(chan struct{})
}

// state returns the channel closed by the next change and whether the log is
// complete (no stream is still being copied).
func (l *criLog) state() (<-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.notify, l.open == 0
}

// criRecord is one parsed log line.
type criRecord struct {
	time    time.Time
	stream  string
	partial bool
	text    []byte
}

var errMalformedRecord = errors.New("malformed CRI log record")

// parseCRIRecord parses one record without its newline.
func parseCRIRecord(line []byte) (criRecord, error) {
	var r criRecord
	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return r, errMalformedRecord
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return r, fmt.Errorf("%w: timestamp: %w", errMalformedRecord, err)
	}
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok || (string(stream) != "stdout" && string(stream) != "stderr") {
		return r, fmt.Errorf("%w: stream", errMalformedRecord)
	}
	tags, text, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		// "ts stream F" with an empty text has no trailing space in some writers.
		tags, text = rest, nil
	}
	tag, _, _ := bytes.Cut(tags, []byte{':'})
	switch string(tag) {
	case "F":
	case "P":
		r.partial = true
	default:
		return r, fmt.Errorf("%w: tag %q", errMalformedRecord, tag)
	}
	r.time, r.stream, r.text = t, string(stream), text
	return r, nil
}

// logOptions are the kubelet's containerLogs parameters the runtime honours.
type logOptions struct {
	follow     bool
	timestamps bool
	since      time.Time // zero: from the start
	tailLines  int64     // <0: all
	limitBytes int64     // <=0: unlimited
}

// errLimitReached ends a stream at limitBytes.
var errLimitReached = errors.New("limit reached")

// serve writes the log to w as the kubelet does: texts only (each line
// prefixed with its timestamp when asked), following it until the container
// has ended and every record is out, or ctx ends.
func (l *criLog) serve(ctx context.Context, w io.Writer, flush func(), o logOptions) error {
	f, err := os.Open(l.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if o.tailLines >= 0 {
		off, err := tailOffset(f, o.tailLines)
		if err != nil {
			return err
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
	}
	out := &limitedWriter{w: w, left: o.limitBytes}
	br := bufio.NewReaderSize(f, 2*maxRecord)
	var pending []byte // a record read only in part
	atLineStart := true
	for {
		changed, complete := l.state()
		for {
			chunk, err := br.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				pending = append(pending, chunk...)
				continue
			}
			if err != nil { // EOF: chunk is the beginning of a record still being written
				pending = append(pending, chunk...)
				break
			}
			rec := chunk[:len(chunk)-1]
			if len(pending) > 0 {
				pending = append(pending, rec...)
				rec, pending = pending, nil
			}
			r, perr := parseCRIRecord(rec)
			if perr != nil {
				continue // as the kubelet: skip what cannot be parsed
			}
			if !o.since.IsZero() && r.time.Before(o.since) {
				atLineStart = !r.partial
				continue
			}
			if o.timestamps && atLineStart {
				if err := out.write([]byte(r.time.Format(time.RFC3339Nano) + " ")); err != nil {
					return nilIfLimit(err)
				}
			}
			if err := out.write(r.text); err != nil {
				return nilIfLimit(err)
			}
			if !r.partial {
				if err := out.write([]byte{'\n'}); err != nil {
					return nilIfLimit(err)
				}
			}
			atLineStart = !r.partial
		}
		flush()
		if !o.follow || complete {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

func nilIfLimit(err error) error {
	if errors.Is(err, errLimitReached) {
		return nil
	}
	return err
}

// tailOffset returns where the last n lines (full-line records, with the
// partial records before them) begin.
func tailOffset(f *os.File, n int64) (int64, error) {
	if n == 0 {
		return f.Seek(0, io.SeekEnd)
	}
	starts := make([]int64, 0, n+1) // ring of the last n line starts
	br := bufio.NewReader(f)
	var off int64
	lineStart := int64(0)
	for {
		rec, err := br.ReadBytes('\n')
		if len(rec) > 0 && err == nil {
			r, perr := parseCRIRecord(rec[:len(rec)-1])
			off += int64(len(rec))
			if perr == nil && !r.partial {
				starts = append(starts, lineStart)
				if int64(len(starts)) > n {
					starts = starts[1:]
				}
				lineStart = off
			} else if perr != nil {
				lineStart = off
			}
			continue
		}
		break
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	if len(starts) == 0 {
		return 0, nil
	}
	return starts[0], nil
}

// limitedWriter writes at most left bytes (left <= 0: no limit).
type limitedWriter struct {
	w    io.Writer
	left int64
}

func (l *limitedWriter) write(p []byte) error {
	if l.left <= 0 {
		_, err := l.w.Write(p)
		return err
	}
	cut := false
	if int64(len(p)) >= l.left {
		p, cut = p[:l.left], true
	}
	_, err := l.w.Write(p)
	l.left -= int64(len(p))
	if err == nil && cut {
		return errLimitReached
	}
	return err
}
