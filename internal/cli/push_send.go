package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// errRetry marks an answer worth another try; wait is the server's hint.
type errRetry struct {
	wait time.Duration
	err  error
}

func (e *errRetry) Error() string { return e.err.Error() }
func (e *errRetry) Unwrap() error { return e.err }

// pushWithRetry sends body until it is stored, refused, or ctx ends.
func pushWithRetry(ctx context.Context, client *http.Client, target, tokenFile string, body pushBody, progress io.Writer) (int, error) {
	backoff := pushBackoffInitial
	for attempt := 1; ; attempt++ {
		code, err := pushOnce(ctx, client, target, tokenFile, body)
		if err == nil {
			return code, nil
		}
		var again *errRetry
		if !errors.As(err, &again) {
			return 0, err
		}
		wait := again.wait
		if wait <= 0 {
			wait = time.Duration(rand.Int64N(int64(backoff))) + backoff/2
			backoff = min(backoff*2, pushBackoffMax)
		}
		deadline, _ := ctx.Deadline()
		if time.Now().Add(wait).After(deadline) {
			return 0, exit(ExitTimeout, fmt.Errorf("drop-box still unavailable after %d tries, giving up at --timeout: %w", attempt, again.err))
		}
		fmt.Fprintf(progress, "push: try %d: %v; again in %s\n", attempt, again.err, wait.Round(100*time.Millisecond))
		select {
		case <-ctx.Done():
			return 0, exit(ExitTimeout, fmt.Errorf("gave up after %d tries: %w", attempt, again.err))
		case <-time.After(wait):
		}
	}
}

// untrusted reports whether err is the drop-box's certificate failing
// verification, which no retry changes.
func untrusted(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}

// pushOnce makes one try: the token read afresh, the file opened afresh.
func pushOnce(ctx context.Context, client *http.Client, target, tokenFile string, body pushBody) (int, error) {
	raw, err := os.ReadFile(tokenFile)
	if err != nil {
		return 0, exit(ExitUsage, fmt.Errorf("read token file: %w", err))
	}
	token := strings.TrimSpace(string(raw))
	if token == "" || strings.ContainsAny(token, " \t\r\n") {
		return 0, exit(ExitUsage, fmt.Errorf("token file %s: empty or not one token", tokenFile))
	}
	f, err := os.Open(body.path)
	if err != nil {
		return 0, exit(ExitUsage, err)
	}
	defer f.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, f)
	if err != nil {
		return 0, exit(ExitUsage, err)
	}
	req.ContentLength = body.size
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, &errRetry{err: err} // the loop reports the timeout
		}
		if untrusted(err) {
			// Another try meets the same certificate: fail now, saying why.
			return 0, exit(ExitUsage, fmt.Errorf("the drop-box's certificate is not trusted (give its CA with --ca-file or SSL_CERT_FILE): %w", err))
		}
		return 0, &errRetry{err: fmt.Errorf("drop-box unreachable: %w", err)}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var answer struct {
		Size   int64  `json:"size"`
		SHA256 string `json:"sha256"`
		Error  string `json:"error"`
	}
	_ = json.Unmarshal(data, &answer)
	msg := answer.Error
	if msg == "" {
		msg = strings.TrimSpace(string(data))
	}
	switch code := resp.StatusCode; code {
	case http.StatusCreated, http.StatusOK:
		if answer.SHA256 != "" && (answer.SHA256 != body.sha256 || answer.Size != body.size) {
			return 0, exit(ExitRefused, fmt.Errorf("the drop-box stored %d bytes sha256:%s, but %d bytes sha256:%s were sent", answer.Size, answer.SHA256, body.size, body.sha256))
		}
		return code, nil
	case http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusBadGateway, http.StatusGatewayTimeout,
		// The drop-box's free-space floor: the volume fills and empties
		// again (a sweep, an operator), so the pod waits as told.
		http.StatusInsufficientStorage:
		return 0, &errRetry{wait: retryAfter(resp.Header.Get("Retry-After")), err: fmt.Errorf("drop-box answered %s: %s", resp.Status, msg)}
	case http.StatusConflict:
		return 0, exit(ExitRefused, fmt.Errorf("a different artifact of this kind is already stored for this pod (409): %s", msg))
	case http.StatusUnauthorized, http.StatusForbidden:
		return 0, exit(ExitRefused, fmt.Errorf("the drop-box refused this pod's token (%d): %s", code, msg))
	case http.StatusRequestEntityTooLarge:
		return 0, exit(ExitRefused, fmt.Errorf("too large for the drop-box (413, %d bytes): %s", body.size, msg))
	default:
		return 0, exit(ExitRefused, fmt.Errorf("drop-box answered %s: %s", resp.Status, msg))
	}
}

// retryAfter parses Retry-After (seconds or an HTTP date), capped; 0 when
// absent or unreadable (the caller backs off on its own).
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	if d < 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}
