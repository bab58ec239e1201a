package ingest

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/lru"
	"crucible.dev/crucible/internal/metrics"
)

// refusalLogEvery is how often one refusal is logged for one token or
// source: a replayed token or a flood is logged once a minute, not once a
// request.
const refusalLogEvery = time.Minute

// errUnknownPod: no row has the request's pod id. Such ids are remembered
// for the negative TTL (h.unknown): a signed token of a pod the store does
// not know is refused without another read.
var errUnknownPod = errors.New("unknown pod")

// refuseBeforeRead refuses, without reading the store, what a signed token
// cannot do for pod: push for another pod than the one it is bound to (its
// kubernetes.io pod name, which its TokenReview would name and decide
// compare), push for a pod id the store recently did not know, or go on
// once its own bucket or its pod uid's is empty. Those buckets are charged
// only by requests refused after a store read (chargeRefusedRead): a stale
// uid, a row whose uid is not recorded yet, a closed row. So one token,
// replayed at any rate against any pods, costs at most its burst of reads
// and then one per refill — and a pod's accepted uploads never spend them.
func (h *Handler) refuseBeforeRead(pod string, pc prechecked, hash, tokenID string) error {
	if pc.podName != pod {
		metrics.IngestPrecheckRejects.WithLabelValues("pod_name").Inc()
		h.logRefusal("token bound to another pod than the request's", tokenID, "pod", pod, "bound_to", pc.podName)
		return deny(http.StatusForbidden, errors.New("token bound to another pod than the request's"))
	}
	now := h.opts.Now()
	if _, ok := h.unknown.Get(pod, now); ok {
		metrics.IngestCacheHits.WithLabelValues("unknown_pod").Inc()
		return deny(http.StatusForbidden, errUnknownPod)
	}
	for _, b := range []struct {
		name, key string
	}{{"token", "t\x00" + hash}, {"pod_uid", "u\x00" + pc.podUID}} {
		if after, empty := peekEmpty(h.readLimiters, b.key, now); empty {
			metrics.IngestPrecheckRejects.WithLabelValues("refused_reads").Inc()
			h.logRefusal("token over its budget of refused store reads", tokenID, "pod", pod, "bucket", b.name)
			return rateLimited(after)
		}
	}
	return nil
}

// chargeRefusedRead charges a request refused after its store read to the
// buckets of its token and of the pod uid it is bound to, and remembers an
// unknown pod id. Refusals that are no verdict on the token (the store or a
// spoke unavailable) charge nothing; a row without its uid yet (503) does.
func (h *Handler) chargeRefusedRead(pod string, pc prechecked, hash string, err error) {
	now := h.opts.Now()
	if errors.Is(err, errUnknownPod) {
		h.unknown.Put(pod, struct{}{}, now.Add(h.opts.NegativeTTL))
	}
	var he *httperr.Error
	if !errors.As(err, &he) || he.Code != http.StatusUnauthorized && he.Code != http.StatusForbidden && !errors.Is(err, errUnbound) {
		return
	}
	for _, key := range []string{"t\x00" + hash, "u\x00" + pc.podUID} {
		take(h.readLimiters, key, now, h.opts.RatePerPod, h.opts.RateBurstPerPod)
	}
}

// peekEmpty reports whether the bucket under key in limiters (none yet:
// full) has less than one token at now, and when it will have one
// (Retry-After, whole seconds). It takes nothing.
func peekEmpty(limiters *lru.Cache[limiter], key string, now time.Time) (retryAfter string, empty bool) {
	lim, ok := limiters.Get(key, now)
	if !ok {
		return "", false
	}
	tokens := lim.TokensAt(now)
	if tokens >= 1 {
		return "", false
	}
	secs := 1.0
	if l := float64(lim.Limit()); l > 0 {
		secs = math.Ceil((1 - tokens) / l)
	}
	return strconv.Itoa(max(1, int(secs))), true
}

// logRefusal logs msg at Debug at most once per refusalLogEvery for the
// token tokenID, so a replay at any rate costs no log volume.
func (h *Handler) logRefusal(msg, tokenID string, args ...any) {
	h.logLimited(h.log.Debug, msg, "token", tokenID, args...)
}

// logLimited logs msg through level, with name=key and args, at most once
// per refusalLogEvery for msg and key.
func (h *Handler) logLimited(level func(string, ...any), msg, name, key string, args ...any) {
	now := h.opts.Now()
	k := msg + "\x00" + key
	if _, seen := h.logged.Get(k, now); seen {
		return
	}
	h.logged.Put(k, struct{}{}, now.Add(refusalLogEvery))
	level(msg, append([]any{name, key}, args...)...)
}
