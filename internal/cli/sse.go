package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"crucible.dev/crucible/internal/api/apiv1"
)

// openEventStream opens one connection of the SSE endpoint server+path
// (a pod's live log, /api/events), resuming after last when it is set. An
// error that another try would not change is a permanentError; a refused
// answer's message is the controller's.
func openEventStream(ctx context.Context, client *http.Client, server, path, last string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+path, nil)
	if err != nil {
		return nil, &permanentError{err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("controller API at %s: %w", server, err)
	}
	if err := redirectError(server, resp); err != nil {
		resp.Body.Close()
		return nil, &permanentError{err}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e struct{ Error string }
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		err := fmt.Errorf("%s (HTTP %d)", msg, resp.StatusCode)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return nil, err
		}
		return nil, &permanentError{err}
	}
	return resp.Body, nil
}

// errorEvent is the error of an SSE `error` event, the stream's last: the
// controller gave up on this connection (a viewer too slow, an upstream
// that failed), and another may go on.
func errorEvent(data string) error {
	var e apiv1.ErrorEvent
	_ = json.Unmarshal([]byte(data), &e)
	return fmt.Errorf("controller: %s", e.Error)
}

// readSSE calls fn with every complete event of an SSE body; it returns
// fn's error, or errStreamCut when the body ends.
func readSSE(body io.Reader, fn func(event, id, data string) error) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxEventBytes)
	var event, data, id string
	for sc.Scan() {
		line := sc.Text()
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				event = value
			case "data":
				data = value
			case "id":
				id = value
			}
			continue
		}
		if event != "" {
			if err := fn(event, id, data); err != nil {
				return err
			}
		}
		event, data, id = "", "", ""
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return &permanentError{fmt.Errorf("an event over %d bytes: %w", maxEventBytes, err)}
	} else if err != nil {
		return fmt.Errorf("%w: %w", errStreamCut, err)
	}
	return errStreamCut
}
