package apiauth

import (
	"net/http"
	"net/netip"
	"strings"
)

// ipv6SourceBits is the prefix IPv6 clients are limited by, as the
// drop-box's per-source bucket is (internal/ingest): one site or host is
// routinely given a whole /64, so per-address buckets would let one client
// rotate through 2^64 of them.
const ipv6SourceBits = 64

// SourceKey is the budget key of r's TCP peer: its IPv4 address, or its
// IPv6 /64, zone dropped and IPv4-mapped addresses unmapped so one client
// has one key. The API never believes X-Forwarded-For here (it has no
// trusted proxies of its own); a RemoteAddr that does not parse (never in
// net/http, which sets it from the connection) is its own key.
func SourceKey(r *http.Request) string {
	ap, err := netip.ParseAddrPort(strings.TrimSpace(r.RemoteAddr))
	if err != nil {
		return r.RemoteAddr
	}
	a := ap.Addr().WithZone("").Unmap()
	if a.Is6() {
		p, _ := a.Prefix(ipv6SourceBits) // cannot fail for an IPv6 address and 64 bits
		return p.String()
	}
	return a.String()
}
