package ingest

import (
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// clientAddr is the address a request is rate-limited by: the TCP peer, or,
// when the peer is a trusted proxy, the right-most X-Forwarded-For hop that
// is not itself a trusted proxy. Hops left of that one are written by the
// client and never believed.
func (h *Handler) clientAddr(r *http.Request) string {
	peer, ok := parseHost(r.RemoteAddr)
	if !ok {
		return r.RemoteAddr
	}
	if !h.trusted(peer) {
		return peer.String()
	}
	client := peer
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a garbled hop: stop at the last address a trusted proxy vouched for
		}
		client = hop.Unmap()
		if !h.trusted(client) {
			break
		}
	}
	return client.String()
}

func parseHost(remoteAddr string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(remoteAddr); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

func (h *Handler) trusted(a netip.Addr) bool {
	for _, p := range h.opts.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// allow takes a token from the bucket of source. When the bucket is empty
// it returns the Retry-After value (whole seconds, at least 1).
func (h *Handler) allow(source string) (ok bool, retryAfter string) {
	now := h.opts.Now()
	lim := h.limiters.getOrAdd(source, now, func() (limiter, time.Time) {
		return rate.NewLimiter(rate.Limit(h.opts.RatePerSource), h.opts.RateBurst), time.Time{}
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

// limiter is one source's token bucket.
type limiter = *rate.Limiter
