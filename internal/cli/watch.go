package cli

import (
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
	body, err := openEventStream(ctx, client, server, path, *last)
	if err != nil {
		return err
	}
	defer body.Close()
	return readSSE(body, func(event, id, data string) error {
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
			return errorEvent(data)
		}
		return nil
	})
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
