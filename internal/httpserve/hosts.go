package httpserve

import (
	"net/http"
	"net/netip"
	"strings"

	"crucible.dev/crucible/internal/httperr"
)

// maxHostBytes bounds the Host a listener parses: a DNS name is at most 253
// bytes, and a trailing dot and a port add little, so nothing an allowlist
// can match is longer.
const maxHostBytes = 300

// RequireHost answers 421 Misdirected Request, before h sees the request,
// to a Host that is neither an IP literal (IPv4, or IPv6 in brackets, any
// port) nor one of names (any port, ASCII case-insensitive, one trailing
// dot tolerated); a missing Host is refused too. A plain-HTTP listener on
// loopback is otherwise readable from any web page open in a browser on the
// same machine: the page rebinds a DNS name of its own to 127.0.0.1, and the
// browser, seeing one origin, hands it the answer. That request still
// carries the page's name as its Host, which no operator listed; an IP
// literal cannot be rebound. setting is the profile key or flag that lists
// names, so that an operator who reaches the listener by a new name learns
// what to change; the refusal names nothing else.
func RequireHost(names []string, setting string, h http.Handler) http.Handler {
	allowed := make(map[string]bool, len(names))
	for _, n := range names {
		allowed[strings.TrimSuffix(asciiLower(n), ".")] = true
	}
	refusal := httperr.New(http.StatusMisdirectedRequest, "this listener does not answer to that Host header; its names are set by "+setting)
	return httperr.Edge{Format: httperr.Text}.Handle(func(w http.ResponseWriter, r *http.Request) error {
		if !hostAllowed(r.Host, allowed) {
			return refusal
		}
		h.ServeHTTP(w, r)
		return nil
	})
}

// hostAllowed is RequireHost's decision; allowed holds lower-case names
// without a trailing dot.
func hostAllowed(hostport string, allowed map[string]bool) bool {
	host, isIP, ok := parseHost(hostport)
	return ok && (isIP || allowed[host])
}

// parseHost splits a Host header into its host, lower-cased (ASCII only,
// so that no Unicode folding turns a foreign name into an allowed one)
// without a trailing dot, and whether that host is an IP literal. ok is
// false for an empty or oversized Host, a name ending in two dots, a port
// that is not digits, an unbracketed IPv6 address, and brackets around
// anything but IPv6 without a zone (a zone is any bytes, and no browser
// sends one).
func parseHost(hostport string) (host string, isIP, ok bool) {
	if hostport == "" || len(hostport) > maxHostBytes {
		return "", false, false
	}
	if rest, bracketed := strings.CutPrefix(hostport, "["); bracketed {
		literal, port, closed := strings.Cut(rest, "]")
		addr, err := netip.ParseAddr(literal)
		if !closed || err != nil || !addr.Is6() || addr.Zone() != "" || !validPort(port) {
			return "", false, false
		}
		return asciiLower(literal), true, true
	}
	host, port := hostport, ""
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
		host, port = hostport[:i], hostport[i:]
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || strings.HasSuffix(host, ".") || strings.Contains(host, ":") || !validPort(port) {
		return "", false, false
	}
	if addr, err := netip.ParseAddr(host); err == nil && addr.Is4() {
		return host, true, true
	}
	return asciiLower(host), false, true
}

// validPort: nothing, or a colon and digits (RFC 3986 allows an empty port).
func validPort(port string) bool {
	if port == "" {
		return true
	}
	digits, ok := strings.CutPrefix(port, ":")
	return ok && strings.Trim(digits, "0123456789") == ""
}

// asciiLower lower-cases A-Z alone; every other byte stays as it is.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
