package ingest

import (
	"errors"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/lru"
)

// ipv6SourceBits is the prefix IPv6 clients are limited by: one site or
// host is routinely given a whole /64, so per-address buckets would let one
// client rotate through 2^64 of them.
const ipv6SourceBits = 64

// clientAddr is the address a request is rate-limited by: the TCP peer, or,
// when the peer is a trusted proxy, the right-most X-Forwarded-For hop that
// is not itself a trusted proxy. Hops left of that one are written by the
// client and never believed; a hop that does not parse stops the walk at
// the last address a trusted proxy vouched for.
func (h *Handler) clientAddr(r *http.Request) (netip.Addr, bool) {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !h.trusted(peer) {
		return peer, true
	}
	client := peer
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop, ok := parseHop(hops[i])
		if !ok {
			break
		}
		client = hop
		if !h.trusted(client) {
			break
		}
	}
	return client, true
}

// sourceKey is the rate-limit bucket of a request: its client address, the
// /64 for IPv6, or the raw peer when that does not parse (never in
// net/http, which sets RemoteAddr from the connection).
func (h *Handler) sourceKey(r *http.Request) string {
	a, ok := h.clientAddr(r)
	if !ok {
		return r.RemoteAddr
	}
	if a.Is6() {
		p, _ := a.Prefix(ipv6SourceBits) // cannot fail for an IPv6 address and 64 bits
		return p.String()
	}
	return a.String()
}

// parseHop reads an address as proxies write it: "1.2.3.4",
// "1.2.3.4:5678", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:443",
// surrounded by spaces. Zones are dropped and IPv4-mapped IPv6 addresses
// unmapped, so one client has one key.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err = netip.ParseAddr(s[1 : len(s)-1]); err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
	} else if a, err = netip.ParseAddr(s); err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

func (h *Handler) trusted(a netip.Addr) bool {
	for _, p := range h.opts.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// chargeSource takes a token from the bucket of a failed request's source
// and returns the request's answer: err, or 429 when the bucket is empty
// (so a flood is answered without even its refusal's cause being logged).
// A token no cluster signed is charged to the source's bucket; a signed
// one refused (401 or 403: a replayed or misused pod token) to a bucket of
// its own, so neither flood empties the other's. Only refusals spend them:
// a pod behind the same address as a flood is accepted all the same, and a
// spoke or store that cannot answer a signed token (503) is no fault of the
// source. A token no loaded key verifies is charged even when answered 503
// (a spoke's keys could not be fetched: it might be that spoke's), since
// anyone can send one: a flood of them during a key outage is bounded too.
func (h *Handler) chargeSource(r *http.Request, signed bool, err error) error {
	limiters := h.limiters
	if signed {
		var he *httperr.Error
		if !errors.As(err, &he) || he.Code != http.StatusUnauthorized && he.Code != http.StatusForbidden {
			return err
		}
		limiters = h.signedLimiters
	}
	if ok, after := take(limiters, h.sourceKey(r), h.opts.Now(), h.opts.RatePerSource, h.opts.RateBurst); !ok {
		return rateLimited(after)
	}
	return err
}

// allowPod takes a token from the bucket of an authenticated pod.
func (h *Handler) allowPod(pod string) (ok bool, retryAfter string) {
	return take(h.podLimiters, pod, h.opts.Now(), h.opts.RatePerPod, h.opts.RateBurstPerPod)
}

// take takes a token from the bucket under key in limiters, made with
// perSecond and burst when there is none. When the bucket is empty it takes
// nothing and returns the Retry-After value (whole seconds, at least 1).
func take(limiters *lru.Cache[limiter], key string, now time.Time, perSecond float64, burst int) (bool, string) {
	lim := limiters.GetOrAdd(key, now, func() (limiter, time.Time) {
		return rate.NewLimiter(rate.Limit(perSecond), burst), time.Time{}
	})
	res := lim.ReserveN(now, 1)
	if !res.OK() {
		return false, "1"
	}
	delay := res.DelayFrom(now)
	if delay == 0 {
		return true, ""
	}
	res.CancelAt(now)
	return false, strconv.Itoa(max(1, int(math.Ceil(delay.Seconds()))))
}

// limiter is one source's or pod's token bucket.
type limiter = *rate.Limiter
