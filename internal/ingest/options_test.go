package ingest

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/profile"
)

// The drop-box takes the profile's [ingest] section as it is: profile's
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
// refused at once, by its profile key, and so is a proxy that is no CIDR,
// with the messages Parse gives (package profile validates the section).
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
	want := []string{
		"ingest options: invalid profile:",
		`  ingest.max_body_bytes "0": must be positive`,
		`  ingest.rate_per_pod "0": must be positive`,
		`  ingest.rate_burst_per_pod "-1": must be positive`,
		`  ingest.max_total_bytes "0": must be positive`,
		`  ingest.upload_rate_window "-1s": must be positive`,
		`  ingest.trusted_proxies[1] "10.0.0.1": must be a CIDR such as 10.0.0.0/8`,
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("New error (-want +got):\n%s", diff)
	}
	if !errors.Is(err, profile.ErrInvalidProfile) {
		t.Errorf("New error %v does not wrap profile.ErrInvalidProfile", err)
	}
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), `ingest.cache_size "0": must be positive`) {
		t.Errorf("New(Options{}) = %v, want the zero section refused", err)
	}
}
