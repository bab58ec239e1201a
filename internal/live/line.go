package live

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"time"
)

// MaxLineBytes bounds one line's text; the rest of a longer line is dropped
// (and the line marked with a trailing " [truncated]"), so a pod printing
// without newlines cannot make a viewer or the broadcaster hold it whole.
const MaxLineBytes = 64 << 10

const truncatedMark = " [truncated]"

// Line is one line of a pod's log.
type Line struct {
	// N is the line's number in the log, from 1.
	N int64
	// TS is when the runtime wrote the line; zero for a replayed artifact,
	// which is stored without timestamps.
	TS   time.Time
	Text string
	// Event is what a viewer is sent for the line (Options.Render's), made
	// once when the stream publishes it; empty without Render, and for
	// lines read back from a stored log.
	Event string
}

// lineReader reads lines of at most MaxLineBytes from r.
type lineReader struct {
	r *bufio.Reader
	// partialAtEOF returns a last line without a newline; otherwise it is
	// io.ErrUnexpectedEOF: a broken follow stream is read again whole.
	partialAtEOF bool
}

func newLineReader(r io.Reader, partialAtEOF bool) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 32<<10), partialAtEOF: partialAtEOF}
}

// next returns the next line without its newline. A last line without a
// newline is returned too; then io.EOF.
func (lr *lineReader) next() (string, error) {
	var b strings.Builder
	truncated := false
	for {
		frag, err := lr.r.ReadSlice('\n')
		data := frag
		newline := len(data) > 0 && data[len(data)-1] == '\n'
		if newline {
			data = data[:len(data)-1]
		}
		if room := MaxLineBytes - b.Len(); len(data) > room {
			b.Write(data[:room])
			truncated = true
		} else {
			b.Write(data)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && (b.Len() > 0 || truncated) && !lr.partialAtEOF:
			return "", io.ErrUnexpectedEOF
		case err == nil, errors.Is(err, io.EOF) && (b.Len() > 0 || truncated):
			s := b.String()
			if truncated {
				s += truncatedMark
			}
			return s, nil
		default:
			return "", err
		}
	}
}

// ReadLines calls fn with every line of the raw log r (a stored artifact,
// which has no timestamps), numbered from 1 as the live stream numbers them.
func ReadLines(r io.Reader, fn func(Line) error) error {
	lr := newLineReader(r, true)
	for n := int64(1); ; n++ {
		text, err := lr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(Line{N: n, Text: text}); err != nil {
			return err
		}
	}
}

// parseTimestamped splits a line of pods/log?timestamps=true into its
// RFC3339Nano timestamp and text. A line without a valid timestamp keeps
// its whole text and reports ok false.
func parseTimestamped(s string) (time.Time, string, bool) {
	stamp, text, found := strings.Cut(s, " ")
	ts, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return time.Time{}, s, false
	}
	if !found {
		text = ""
	}
	return ts, text, true
}
