package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"crucible.dev/crucible/internal/api/apiv1"
)

// errWatchReset: the controller may have dropped changes (a resume from
// before its history, or a restarted controller); the watcher re-lists.
var errWatchReset = errors.New("changes may have been missed")

// watchPods prints every change of a work pod matching q (cluster, kind,
// state) from GET /api/events as it happens, after the listing already
// printed, until ctx ends (Ctrl-C: ExitInterrupted). It resumes with
// Last-Event-ID after a broken connection and re-lists after a reset.
func watchPods(ctx context.Context, c *apiClient, q url.Values, format string, out, progress io.Writer) error {
	if c.err != nil {
		return c.err
	}
	eq := url.Values{}
	for _, k := range []string{"cluster", "kind"} {
		if v := q.Get(k); v != "" {
			eq.Set(k, v)
		}
	}
	var states []string
	if s := q.Get("state"); s != "" {
		states = strings.Split(s, ",")
	}
	var last string
	backoff := 500 * time.Millisecond
	for {
		err := watchOnce(ctx, c.stream, c.server, "/api/events?"+eq.Encode(), &last, func(wp apiv1.WorkPod) error {
			if len(states) > 0 && !slices.Contains(states, string(wp.State)) {
				return nil
			}
			return printWatched(out, format, wp)
		})
		if ctx.Err() != nil {
			return &ExitError{Code: ExitInterrupted, Err: ctx.Err()}
		}
		var permanent *permanentError
		switch {
		case errors.As(err, &permanent):
			return permanent.err
		case errors.Is(err, errWatchReset):
			fmt.Fprintln(progress, "watch: changes may have been missed; listing again")
			var rows []apiv1.WorkPod
			if err := c.do(ctx, http.MethodGet, "/api/pods?"+q.Encode(), nil, &rows); err != nil {
				return err
			}
			for _, wp := range rows {
				if err := printWatched(out, format, wp); err != nil {
					return err
				}
			}
			last, backoff = "", 500*time.Millisecond
			continue
		case err != nil:
			fmt.Fprintf(progress, "watch: %v; reconnecting\n", err)
		}
		select {
		case <-ctx.Done():
			return &ExitError{Code: ExitInterrupted, Err: ctx.Err()}
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// watchOnce reads one connection of GET server+path (/api/events).
func watchOnce(ctx context.Context, client *http.Client, server, path string, last *string, fn func(apiv1.WorkPod) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+path, nil)
	if err != nil {
		return &permanentError{err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("controller API at %s: %w", server, err)
	}
	defer resp.Body.Close()
	if err := redirectError(server, resp); err != nil {
		return &permanentError{err}
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e struct{ Error string }
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		err := fmt.Errorf("%s (HTTP %d)", msg, resp.StatusCode)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return err
		}
		return &permanentError{err}
	}
	return readSSE(resp.Body, func(event, id, data string) error {
		switch event {
		case "pod":
			var wp apiv1.WorkPod
			if err := json.Unmarshal([]byte(data), &wp); err != nil {
				return &permanentError{fmt.Errorf("malformed pod event: %w", err)}
			}
			if err := fn(wp); err != nil {
				return &permanentError{err}
			}
			*last = id
		case "reset":
			return errWatchReset
		case "error":
			var e apiv1.ErrorEvent
			_ = json.Unmarshal([]byte(data), &e)
			return fmt.Errorf("controller: %s", e.Error)
		}
		return nil
	})
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

// printWatched prints one changed pod: a JSON object per line, or a table
// row in the listing's columns.
func printWatched(w io.Writer, format string, wp apiv1.WorkPod) error {
	if format == "json" {
		b, err := json.Marshal(wp)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	exit := ""
	if wp.ExitCode != nil {
		exit = fmt.Sprint(*wp.ExitCode)
	}
	_, err := fmt.Fprintf(w, "%-20s  %-10s  %-5s  %-10s  %-4s  %-8s  %-10s  %s\n", wp.ID, wp.Cluster, wp.Kind, wp.State, exit,
		time.Since(wp.CreatedAt).Round(time.Second), wp.Submitter, wp.Reason)
	return err
}
