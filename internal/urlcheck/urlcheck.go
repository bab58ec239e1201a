// Package urlcheck is the one check of the base URLs and listen hosts that
// crucible is configured with (the profile, the mirror's options, the plain
// HTTP listeners): https everywhere, plain http only where nothing leaves the
// machine, and nothing in a URL that would be dropped or leak (credentials,
// query, fragment).
package urlcheck

import (
	"net"
	"net/url"
	"strings"
)

// LoopbackHost reports whether host (a name or an IP literal, without port)
// is this machine: "localhost" or a loopback address. Other names are not
// resolved: a name that resolves to loopback today may not tomorrow.
func LoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// BaseURL reports what is wrong with raw as a base URL, each problem a short
// phrase, in a fixed order; none when it is fine. It must be absolute and
// https — or plain http on a loopback host when httpLoopback — without
// credentials, query or fragment, and without a path unless pathAllowed
// (API servers behind a proxy carry a path prefix; a URL crucible serves at
// the root of a listener cannot).
func BaseURL(raw string, httpLoopback, pathAllowed bool) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return []string{"not a URL"}
	}
	if !u.IsAbs() || u.Host == "" {
		return []string{"must be an absolute URL"}
	}
	var problems []string
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && httpLoopback && LoopbackHost(u.Hostname()):
	case u.Scheme == "http" && httpLoopback:
		problems = append(problems, "http is only allowed on a loopback host")
	default:
		problems = append(problems, "scheme must be https")
	}
	if u.User != nil {
		problems = append(problems, "must not contain credentials")
	}
	if u.RawQuery != "" || u.ForceQuery {
		problems = append(problems, "must not have a query")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		problems = append(problems, "must not have a fragment")
	}
	if !pathAllowed && u.Path != "" && u.Path != "/" {
		problems = append(problems, "must not have a path")
	}
	return problems
}
