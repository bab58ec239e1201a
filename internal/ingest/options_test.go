package ingest

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/profile"
)

// The drop-box takes the profile's [ingest] section as it is: fleet's
// defaults reach the handler in its own units, the proxies parsed.
func TestOptionsTakeTheSection(t *testing.T) {
	e := newEnv(t)
	opts := e.h.opts.Options
	opts.Ingest = profile.Default().Ingest
	opts.TrustedProxies = []string{"10.0.0.0/8", "fd00::/8"}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	c := h.opts
	got := []any{c.MaxBodyBytes, c.AcceptTTL, c.NegativeTTL, c.UploadRateWindow, c.RatePerSource, c.RatePerPod, c.RateBurstPerPod, c.MaxKindsPerPod, c.MaxTotalBytes, c.TrustedProxies}
	want := []any{int64(profile.DefaultIngestMaxBodyBytes), profile.DefaultIngestAcceptTTL, profile.DefaultIngestNegativeTTL, profile.DefaultIngestUploadRateWindow,
		float64(profile.DefaultIngestRatePerSource), float64(profile.DefaultIngestRatePerPod), profile.DefaultIngestRateBurstPod, profile.DefaultIngestMaxKindsPerPod,
		int64(profile.DefaultIngestMaxTotalBytes), []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("handler's limits (-want +got):\n%s", diff)
	}
}

// The drop-box has no defaults of its own: every zero or negative limit is
// refused at once, by its profile key, and so is a proxy that is no CIDR.
func TestOptionsRefuseZeroLimits(t *testing.T) {
	e := newEnv(t)
	opts := e.h.opts.Options
	opts.MaxBodyBytes, opts.RatePerPod, opts.RateBurstPerPod, opts.MaxTotalBytes = 0, 0, -1, 0
	opts.UploadRateWindow = profile.Duration{Duration: -time.Second}
	opts.TrustedProxies = []string{"10.0.0.0/8", "10.0.0.1"}
	_, err := New(opts)
	if err == nil {
		t.Fatal("zero limits accepted")
	}
	const fleets = " must be positive (its default is the profile's, applied by package fleet)"
	want := []string{
		"ingest options: ingest.max_body_bytes: 0:" + fleets,
		"ingest.rate_per_pod: 0:" + fleets,
		"ingest.rate_burst_per_pod: -1:" + fleets,
		"ingest.max_total_bytes: 0:" + fleets,
		"ingest.upload_rate_window: -1s:" + fleets,
		`ingest.trusted_proxies[1]: netip.ParsePrefix("10.0.0.1"): no '/'`,
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("New error (-want +got):\n%s", diff)
	}
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "ingest.cache_size: 0:") {
		t.Errorf("New(Options{}) = %v, want the zero section refused", err)
	}
}
