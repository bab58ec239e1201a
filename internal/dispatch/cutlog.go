package dispatch

import (
	"bytes"
	"fmt"
	"io"
)

// cutMarkFormat ends a stored log that was cut at [pods] max_log_bytes, so
// whoever reads it knows it is not the whole log and where the rest went.
const cutMarkFormat = "[crucible: log cut at %d bytes ([pods] max_log_bytes); the rest was not stored]\n"

// CutLog reads r up to limit bytes. A log longer than limit keeps its first
// bytes and ends in a line saying where it was cut, the whole at most limit
// bytes, so the stored log is complete up to the cap and says so. A log of
// at most limit bytes passes unchanged, and so does any log when limit is
// too small for the line.
func CutLog(r io.Reader, limit int64) io.Reader {
	mark := fmt.Sprintf(cutMarkFormat, limit)
	room := int64(len(mark)) + 1 // the mark, after a newline if the kept part ends mid-line
	if limit <= room {
		return io.LimitReader(r, limit)
	}
	head := &lastByte{r: io.LimitReader(r, limit-room)}
	return io.MultiReader(head, &cutTail{r: r, head: head, room: room, mark: mark})
}

// lastByte remembers the last byte read through it.
type lastByte struct {
	r    io.Reader
	last byte
}

func (l *lastByte) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if n > 0 {
		l.last = p[n-1]
	}
	return n, err
}

// cutTail is what follows the head: the rest of the log if it fits in room,
// else the mark.
type cutTail struct {
	r    io.Reader
	head *lastByte
	room int64
	mark string
	out  io.Reader // decided on the first Read
}

func (c *cutTail) Read(p []byte) (int, error) {
	if c.out == nil {
		rest, err := io.ReadAll(io.LimitReader(c.r, c.room+1))
		if err != nil {
			return 0, err
		}
		switch {
		case int64(len(rest)) <= c.room:
			c.out = bytes.NewReader(rest)
		case c.head.last == '\n':
			c.out = bytes.NewReader([]byte(c.mark))
		default:
			c.out = bytes.NewReader([]byte("\n" + c.mark))
		}
	}
	return c.out.Read(p)
}
