package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"crucible.dev/crucible/internal/live"
)

// startSSE begins a Server-Sent Events answer after every check passed: it
// lifts the listener's write deadline (a stream lasts as long as its pod or
// its watcher), sets the headers that keep proxies from buffering or
// sniffing it, writes 200 and a first comment naming the stream. From here
// on failures are events, never a status.
func startSSE(w http.ResponseWriter, banner string) *sseWriter {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // not every writer has a deadline to lift
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK) //nolint:forbidigo // a stream: its body is events, its failures events too
	sse := &sseWriter{w: w, rc: rc}
	sse.comment(banner)
	return sse
}

// sseWriter writes events; the first write error sticks and ends the stream.
type sseWriter struct {
	w   io.Writer
	rc  *http.ResponseController
	err error
}

func (e *sseWriter) write(s string) {
	if e.err == nil {
		_, e.err = io.WriteString(e.w, s)
	}
}

func (e *sseWriter) comment(text string) { e.write(": " + text + "\n\n") }

func (e *sseWriter) event(name, id string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		e.err = err
		return
	}
	var sb strings.Builder
	if id != "" {
		sb.WriteString("id: " + id + "\n")
	}
	sb.WriteString("event: " + name + "\ndata: ")
	sb.Write(b)
	sb.WriteString("\n\n")
	e.write(sb.String())
}

func (e *sseWriter) line(l live.Line) {
	ev := LineEvent{Text: l.Text}
	if !l.TS.IsZero() {
		ev.TS = l.TS.UTC().Format(time.RFC3339Nano)
	}
	e.event("line", strconv.FormatInt(l.N, 10), ev)
}

func (e *sseWriter) flush() error {
	if e.err == nil {
		e.err = e.rc.Flush()
	}
	return e.err
}
