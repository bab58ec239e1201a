package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/live"
)

// flushEvery bounds what an SSE writer writes between flushes, so that each
// flush's write deadline bounds a bounded amount of data.
const flushEvery = 256 << 10

// startSSE begins a Server-Sent Events answer after every check passed: it
// lifts the listener's write deadline (a stream lasts as long as its pod or
// its watcher) for one of timeout per flush ([live] write_timeout), sets the
// headers that keep proxies from buffering or sniffing it, writes 200 and a
// first comment naming the stream. From here on failures are events, never
// a status. A client that stops reading is cut once a write and flush take
// longer than timeout: its handler returns and frees what it held, instead
// of blocking in Write for as long as the client likes.
func startSSE(w http.ResponseWriter, banner string, timeout time.Duration) *sseWriter {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // not every writer has a deadline to lift
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK) //nolint:forbidigo // a stream: its body is events, its failures events too
	sse := &sseWriter{w: w, rc: rc, timeout: timeout}
	sse.comment(banner)
	return sse
}

// sseWriter writes events; the first write error sticks and ends the stream
// (a missed deadline is os.ErrDeadlineExceeded).
type sseWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
	// armed: the deadline of the writes since the last flush is set.
	armed     bool
	unflushed int
	err       error
	// final: the stream's last event (end or error) was written; nothing
	// may follow it.
	final bool
}

func (e *sseWriter) write(s string) {
	if e.err != nil {
		return
	}
	if !e.armed && e.timeout > 0 {
		_ = e.rc.SetWriteDeadline(time.Now().Add(e.timeout)) // a writer without deadlines has no way to be cut
		e.armed = true
	}
	_, e.err = io.WriteString(e.w, s)
	if e.unflushed += len(s); e.err == nil && e.unflushed >= flushEvery {
		_ = e.flush()
	}
}

func (e *sseWriter) comment(text string) { e.write(": " + text + "\n\n") }

func (e *sseWriter) event(name, id string, data any) {
	e.final = e.final || name == "end" || name == "error"
	ev, err := formatEvent(name, id, data)
	if err != nil {
		e.err = err
		return
	}
	e.write(ev)
}

// formatEvent is one event as the stream carries it.
func formatEvent(name, id string, data any) (string, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	sb.Grow(len(id) + len(name) + len(b) + 24)
	if id != "" {
		sb.WriteString("id: " + id + "\n")
	}
	sb.WriteString("event: " + name + "\ndata: ")
	sb.Write(b)
	sb.WriteString("\n\n")
	return sb.String(), nil
}

// line writes a log line's event: the one the live hub made when it
// published the line (renderLine, shared by all its viewers), or, for a
// line read back from a stored log, one made here.
func (e *sseWriter) line(l live.Line) {
	if l.Event == "" {
		l.Event = renderLine(l)
	}
	e.write(l.Event)
}

// renderLine is a log line's event (live.Options.Render): "line", its
// number as the id (a reconnect's Last-Event-ID), its text and timestamp.
func renderLine(l live.Line) string {
	ev := apiv1.LineEvent{Text: l.Text}
	if !l.TS.IsZero() {
		ev.TS = l.TS.UTC().Format(time.RFC3339Nano)
	}
	s, _ := formatEvent("line", strconv.FormatInt(l.N, 10), ev) // a struct of two strings always encodes
	return s
}

func (e *sseWriter) flush() error {
	if e.err == nil {
		if !e.armed && e.timeout > 0 {
			_ = e.rc.SetWriteDeadline(time.Now().Add(e.timeout))
		}
		e.err = e.rc.Flush()
		e.armed, e.unflushed = false, 0
	}
	return e.err
}
