package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"crucible.dev/crucible/internal/api/apiv1"
)

// ExitInterrupted is the exit code after Ctrl-C (128 + SIGINT), as shells do.
const ExitInterrupted = 130

// followBudget bounds reconnecting to the controller without receiving
// anything; a line or a successful connect starts it again.
const followBudget = 2 * time.Minute

// maxEventBytes bounds one SSE field line (the controller caps log lines at
// 64 KiB; JSON escaping can grow them).
const maxEventBytes = 1 << 20

// errStreamCut is a stream that ended without its end event.
var errStreamCut = errors.New("log stream ended early")

// followLog prints a work pod's log from GET /api/pods/{id}/logs as SSE,
// line by line as it comes, reconnecting with Last-Event-ID when the
// connection breaks, and returns how the pod ended. Ctrl-C (ctx cancelled)
// is an ExitError with ExitInterrupted.
func followLog(ctx context.Context, c *apiClient, id string, out, progress io.Writer) (apiv1.EndEvent, error) {
	if c.err != nil {
		return apiv1.EndEvent{}, c.err
	}
	var last string
	backoff := 500 * time.Millisecond
	deadline := time.Now().Add(followBudget)
	for {
		end, progressed, err := followOnce(ctx, c.stream, c.server, id, &last, out)
		if err == nil {
			return end, nil
		}
		if ctx.Err() != nil {
			return apiv1.EndEvent{}, &ExitError{Code: ExitInterrupted, Err: ctx.Err()}
		}
		var permanent *permanentError
		if errors.As(err, &permanent) {
			return apiv1.EndEvent{}, permanent.err
		}
		if progressed {
			backoff, deadline = 500*time.Millisecond, time.Now().Add(followBudget)
		}
		if time.Now().After(deadline) {
			return apiv1.EndEvent{}, fmt.Errorf("following %s: %w", id, err)
		}
		fmt.Fprintf(progress, "%s: %v; reconnecting\n", id, err)
		select {
		case <-ctx.Done():
			return apiv1.EndEvent{}, &ExitError{Code: ExitInterrupted, Err: ctx.Err()}
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// permanentError is an answer that another try would not change.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

// followOnce reads one connection's events; progressed reports whether it
// delivered a line (so the retry budget starts again).
func followOnce(ctx context.Context, client *http.Client, server, id string, last *string, out io.Writer) (apiv1.EndEvent, bool, error) {
	body, err := openEventStream(ctx, client, server, "/api/pods/"+url.PathEscape(id)+"/logs", *last)
	if err != nil {
		return apiv1.EndEvent{}, false, err
	}
	defer body.Close()
	got := false // a line arrived: the retry budget starts again
	var end apiv1.EndEvent
	errEnd := errors.New("end event") // stops readSSE at the end event
	err = readSSE(body, func(event, eventID, data string) error {
		switch event {
		case "line":
			var l apiv1.LineEvent
			if err := json.Unmarshal([]byte(data), &l); err != nil {
				return &permanentError{fmt.Errorf("malformed line event: %w", err)}
			}
			if _, err := fmt.Fprintln(out, l.Text); err != nil {
				return &permanentError{err}
			}
			*last, got = eventID, true
		case "end":
			if err := json.Unmarshal([]byte(data), &end); err != nil {
				return &permanentError{fmt.Errorf("malformed end event: %w", err)}
			}
			return errEnd
		case "error":
			// Too slow, or the upstream failed: both may pass; resume.
			return errorEvent(data)
		}
		return nil
	})
	if errors.Is(err, errEnd) {
		return end, true, nil
	}
	return apiv1.EndEvent{}, got, err
}

// endError reports a work pod that did not succeed as an error; progress
// gets its end state either way.
func endError(id string, end apiv1.EndEvent, progress io.Writer) error {
	state := string(end.State)
	if end.ExitCode != nil {
		state += fmt.Sprintf(" (exit code %d)", *end.ExitCode)
	}
	if end.Reason != "" {
		state += ": " + end.Reason
	}
	fmt.Fprintf(progress, "%s: %s\n", id, state)
	if end.State == "succeeded" {
		return nil
	}
	return fmt.Errorf("work pod %s %s", id, state)
}
