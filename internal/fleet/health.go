package fleet

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/metrics"
)

// Health is a cluster's state as of its last probe, as the API shows it.
type Health struct {
	Cluster string `json:"cluster"`
	// Reachable: the cluster's API answered (anything but a network error,
	// a timeout, 429 or 5xx). False also when no request was sent because
	// the hub gave no token (token_source = "request").
	Reachable bool `json:"reachable"`
	// CredentialsValid: the API accepted the controller's token. False
	// whenever the API was not reachable.
	CredentialsValid bool `json:"credentials_valid"`
	// TokenExpiry is the exp claim of the token in the token file, read
	// without verifying it (nil when the file is unreadable or has none),
	// or with token_source = "request" the expiry the hub gave the token
	// in use (nil while there is none).
	TokenExpiry *time.Time `json:"token_expiry,omitempty"`
	// LastError is the probe's error, if it failed.
	LastError string `json:"last_error,omitempty"`
	// CheckedAt is when the probe ended (UTC); zero before the first probe.
	CheckedAt time.Time `json:"checked_at"`
}

// probe results, the values of crucible_cluster_probes_total's result label.
const (
	probeOK           = "ok"
	probeUnauthorized = "unauthorized"
	probeUnreachable  = "unreachable"
	probeError        = "error"
)

// maxTokenBytes bounds the token file read for its expiry.
const maxTokenBytes = 64 << 10

// Probe checks the cluster with a SelfSubjectReview, which every
// authenticated identity may create, so it tests reachability and the
// controller's credentials and nothing else. It stores the result (see
// Health) and updates the cluster's metrics, unless ctx was cancelled.
func (c *Client) Probe(ctx context.Context) Health {
	_, err := c.Kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	result := classifyProbe(err)
	h := Health{
		Cluster:          c.Entry.Name,
		Reachable:        (result == probeOK || result == probeUnauthorized || result == probeError) && !errors.Is(err, ErrTokenRequest),
		CredentialsValid: result == probeOK,
		CheckedAt:        time.Now().UTC(),
	}
	if err != nil {
		h.LastError = err.Error()
	}
	if exp, ok := c.tokens.Expiry(); ok {
		h.TokenExpiry = &exp
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// Shutting down: what the probe saw says nothing about the cluster.
		return h
	}

	c.mu.Lock()
	c.health = h
	c.mu.Unlock()

	name := c.Entry.Name
	metrics.ClusterProbes.WithLabelValues(name, result).Inc()
	if h.CredentialsValid {
		metrics.ClusterUp.WithLabelValues(name).Set(1)
	} else {
		metrics.ClusterUp.WithLabelValues(name).Set(0)
	}
	if h.TokenExpiry != nil {
		metrics.ClusterTokenExpiry.WithLabelValues(name).Set(float64(h.TokenExpiry.Unix()))
	} else {
		metrics.ClusterTokenExpiry.DeleteLabelValues(name)
	}
	return h
}

// Health returns the result of the last probe; before the first one, only
// Cluster is set.
func (c *Client) Health() Health {
	c.mu.Lock()
	h := c.health
	c.mu.Unlock()
	if h.TokenExpiry != nil {
		exp := *h.TokenExpiry
		h.TokenExpiry = &exp
	}
	return h
}

// classifyProbe maps a SelfSubjectReview error to a probe result: 401 and 403
// are a rejected token (with anonymous auth on, a rejected token becomes
// system:anonymous, which may not create SelfSubjectReviews), and so is a
// hub that refuses the token (token_source = "request"); network errors,
// timeouts, 429 and 5xx mean the API is not usable now, as does a hub that
// failed to give a token; any other answer came from a reachable API that
// still did not confirm the token.
func classifyProbe(err error) string {
	var status apierrors.APIStatus
	var noToken *tokenRequestError
	switch {
	case err == nil:
		return probeOK
	case errors.As(err, &noToken) && noToken.refused:
		return probeUnauthorized
	case errors.As(err, &noToken):
		return probeUnreachable
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return probeUnauthorized
	case !errors.As(err, &status):
		return probeUnreachable // transport error, timeout, cancelled
	case status.Status().Code == http.StatusTooManyRequests, status.Status().Code >= 500:
		return probeUnreachable
	default:
		return probeError
	}
}

// readTokenExpiry returns the exp claim of the JWT in the file at path. The
// token is not verified (the API server does that) and never leaves this
// function.
func readTokenExpiry(path string) (time.Time, bool) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil || len(data) > maxTokenBytes {
		return time.Time{}, false
	}
	return tokenExpiry(data)
}

// tokenExpiry decodes the payload of a compact JWS (header.payload.signature,
// base64url) and returns its exp claim.
func tokenExpiry(token []byte) (time.Time, bool) {
	parts := bytes.Split(bytes.TrimSpace(token), []byte("."))
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload := make([]byte, base64.RawURLEncoding.DecodedLen(len(parts[1])))
	n, err := base64.RawURLEncoding.Decode(payload, bytes.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload[:n], &claims); err != nil || claims.Exp == "" {
		return time.Time{}, false
	}
	exp, err := claims.Exp.Float64()
	// Beyond year 9999 time.Time's JSON encoding fails; no real token gets there.
	if err != nil || exp <= 0 || math.IsNaN(exp) || exp >= 253402300800 {
		return time.Time{}, false
	}
	return time.Unix(int64(exp), 0).UTC(), true
}

// ProbeLoop probes every cluster now and then every interval, all clusters
// at once, each probe bounded by the interval (at most 10 s), until ctx
// ends. After a round in which a cluster failed, the next round comes
// sooner — 1 s, then doubling up to the interval — so a spoke that comes
// back, or whose authn webhook started a moment after the controller's
// first probe, is seen healthy within seconds rather than an interval later.
// It logs every change of a cluster's reachability or credentials. It is a
// Start(ctx)-style runnable: it returns nil when ctx ends.
func (cs *Clients) ProbeLoop(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("probe interval must be positive, got %s", every)
	}
	timeout := min(every, 10*time.Second)
	retry := time.Duration(0)
	for {
		healthy := cs.probeAll(ctx, timeout)
		var wait time.Duration
		wait, retry = nextProbe(healthy, retry, every)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// firstReprobe is how soon a failed round is repeated.
const firstReprobe = time.Second

// nextProbe decides when the next round comes after one that was healthy
// or not, and the re-probe delay to use after the next failed round.
func nextProbe(healthy bool, retry, every time.Duration) (wait, nextRetry time.Duration) {
	if healthy {
		return every, 0
	}
	if retry == 0 {
		retry = firstReprobe
	}
	return min(retry, every), min(2*retry, every)
}

// probeAll probes every cluster at once and reports whether all of them
// accepted the controller's credentials.
func (cs *Clients) probeAll(ctx context.Context, timeout time.Duration) bool {
	var wg sync.WaitGroup
	var failed atomic.Bool
	for _, c := range cs.All() {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			before := c.Health()
			h := c.Probe(pctx)
			if !h.CredentialsValid {
				failed.Store(true)
			}
			if ctx.Err() != nil {
				return
			}
			cs.logChange(before, h)
		})
	}
	wg.Wait()
	return !failed.Load()
}

func (cs *Clients) logChange(before, after Health) {
	first := before.CheckedAt.IsZero()
	if !first && before.Reachable == after.Reachable && before.CredentialsValid == after.CredentialsValid {
		return
	}
	switch {
	case after.CredentialsValid:
		cs.log.Info("cluster healthy", "cluster", after.Cluster)
	case after.Reachable:
		cs.log.Warn("cluster rejects the controller's credentials", "cluster", after.Cluster, "error", after.LastError)
	default:
		cs.log.Warn("cluster unreachable", "cluster", after.Cluster, "error", after.LastError)
	}
}
