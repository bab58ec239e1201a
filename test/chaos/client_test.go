package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
)

// client talks to the controller's API and counts every answer by status
// ("conn" for a request that got no answer at all).
type client struct {
	s    *devstack.Stack
	http *http.Client
	// bases are the controllers' internal URLs, taken in turn (several
	// replicas under HA); one by default.
	bases []string
	next  atomic.Uint64

	mu       sync.Mutex
	byStatus map[string]int
}

func newClient(s *devstack.Stack) *client {
	return &client{s: s, http: &http.Client{Timeout: 4 * time.Minute}, bases: []string{s.Federation.ControllerInternalURL}, byStatus: map[string]int{}}
}

func (c *client) count(code int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.byStatus["conn"]++
		return
	}
	c.byStatus[fmt.Sprint(code)]++
}

func (c *client) statuses() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.byStatus))
	for k, v := range c.byStatus {
		m[k] = v
	}
	return m
}

// do sends one request to the next controller; err is a transport error
// (no answer).
func (c *client) do(ctx context.Context, method, path string, body any) (int, http.Header, []byte, error) {
	return c.doWith(ctx, method, path, body, nil)
}

// doWith is do with extra request headers (an Idempotency-Key).
func (c *client) doWith(ctx context.Context, method, path string, body any, header http.Header) (int, http.Header, []byte, error) {
	return c.doAt(ctx, c.bases[c.next.Add(1)%uint64(len(c.bases))], method, path, body, header)
}

// doAt sends one request to the controller at base.
func (c *client) doAt(ctx context.Context, base, method, path string, body any, header http.Header) (int, http.Header, []byte, error) {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(apiv1.ClientHeader, "chaos")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.count(0, err)
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.count(0, err)
		return 0, nil, nil, err
	}
	c.count(resp.StatusCode, nil)
	return resp.StatusCode, resp.Header, data, nil
}

// listAll reads every row, page by page.
func (c *client) listAll(ctx context.Context) ([]apiv1.WorkPod, error) {
	var all []apiv1.WorkPod
	cont := ""
	for {
		path := "/api/pods?limit=1000"
		if cont != "" {
			path += "&continue=" + url.QueryEscape(cont)
		}
		var page []apiv1.WorkPod
		var next string
		err := retryUntil(ctx, func() (bool, error) {
			code, h, body, err := c.do(ctx, http.MethodGet, path, nil)
			if err != nil || code >= 500 {
				return false, nil
			}
			if code != http.StatusOK {
				return false, fmt.Errorf("list: %d %s", code, body)
			}
			next = h.Get(apiv1.ContinueHeader)
			return true, json.Unmarshal(body, &page)
		})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		cont = next
	}
}

// artifact reads an artifact and reports whether it is stored with want's
// bytes and sha256.
func (c *client) artifactIntact(ctx context.Context, id, kind string, want []byte) (bool, error) {
	sum := sha256.Sum256(want)
	var ok bool
	err := retryUntil(ctx, func() (bool, error) {
		code, h, body, err := c.do(ctx, http.MethodGet, "/api/pods/"+id+"/artifacts/"+kind, nil)
		if err != nil || code >= 500 {
			return false, nil
		}
		ok = code == http.StatusOK && h.Get("X-Crucible-SHA256") == hex.EncodeToString(sum[:]) && bytes.Equal(body, want)
		return true, nil
	})
	return ok, err
}

// retryUntil calls f every 250ms until it reports done or an error, or ctx
// ends (a deadline, never a fixed sleep).
func retryUntil(ctx context.Context, f func() (bool, error)) error {
	for {
		done, err := f()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// logTail returns the last n lines of pod's collected log, or why there is
// none: a failed row's log says why its pod failed, which the row's reason
// ("Error") does not.
func (c *client) logTail(ctx context.Context, pod string, n int) string {
	code, _, log, err := c.do(ctx, http.MethodGet, "/api/pods/"+pod+"/artifacts/log", nil)
	switch {
	case err != nil:
		return fmt.Sprintf("(log not read: %v)", err)
	case code != http.StatusOK:
		return fmt.Sprintf("(log not read: status %d)", code)
	}
	lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
	return "  " + strings.Join(lines[max(0, len(lines)-n):], "\n  ")
}
