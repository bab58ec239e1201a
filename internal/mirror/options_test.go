package mirror

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/profile"
)

func TestOptionsValidation(t *testing.T) {
	valid := func() Options {
		d := profile.Default().Mirror
		return Options{
			Upstream:    http.DefaultClient,
			UpstreamURL: "https://127.0.0.1:6443",
			ExternalURL: "https://crucible.example.com",
			TTL:         d.TTL.Duration,
			MaxStale:    d.MaxStale.Duration,
		}
	}
	tests := []struct {
		name string
		edit func(*Options)
		want []string
	}{
		{"valid", func(*Options) {}, nil},
		{"loopback http", func(o *Options) {
			o.UpstreamURL, o.ExternalURL = "http://localhost:8080", "http://127.0.0.1:8443/"
		}, nil},
		{"ipv6 loopback http", func(o *Options) { o.UpstreamURL = "http://[::1]:6443" }, nil},
		{"upstream behind a path prefix", func(o *Options) {
			o.UpstreamURL = "https://rancher.example.com/k8s/clusters/c-1/"
		}, nil},
		{"explicit durations", func(o *Options) { o.TTL, o.MaxStale = time.Second, time.Hour }, nil},
		{"empty", func(o *Options) { *o = Options{} }, []string{
			"Upstream: required",
			"UpstreamURL: required",
			"ExternalURL: required",
			"TTL: must be positive (the profile's mirror.ttl), got 0s",
			"MaxStale: must be positive (the profile's mirror.max_stale), got 0s",
		}},
		{"http off loopback", func(o *Options) {
			o.UpstreamURL, o.ExternalURL = "http://10.0.0.1:6443", "http://localhost.example.com"
		}, []string{
			"UpstreamURL: http is only allowed on a loopback host",
			"ExternalURL: http is only allowed on a loopback host",
		}},
		{"not absolute", func(o *Options) { o.UpstreamURL, o.ExternalURL = "127.0.0.1:6443/x", "https://" }, []string{
			"UpstreamURL: not a URL",
			"ExternalURL: must be an absolute URL",
		}},
		{"relative", func(o *Options) { o.ExternalURL = "/crucible" }, []string{
			"ExternalURL: must be an absolute URL",
		}},
		{"other scheme", func(o *Options) { o.UpstreamURL = "ftp://127.0.0.1" }, []string{
			"UpstreamURL: scheme must be https",
		}},
		{"credentials, query and fragment", func(o *Options) {
			o.ExternalURL = "https://u:p@crucible.example.com/?a=1#f"
		}, []string{
			"ExternalURL: must not contain credentials; must not have a query; must not have a fragment",
		}},
		{"empty query and fragment", func(o *Options) { o.UpstreamURL = "https://127.0.0.1:6443?#" }, []string{
			"UpstreamURL: must not have a query; must not have a fragment",
		}},
		{"external path", func(o *Options) { o.ExternalURL = "https://crucible.example.com/mirror" }, []string{
			"ExternalURL: must not have a path",
		}},
		{"negative durations", func(o *Options) { o.TTL, o.MaxStale = -time.Second, -time.Minute }, []string{
			"TTL: must be positive (the profile's mirror.ttl), got -1s",
			"MaxStale: must be positive (the profile's mirror.max_stale), got -1m0s",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.edit(&o)
			var got []string
			if err := o.validate(); err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewReportsEveryProblem(t *testing.T) {
	_, err := New(Options{TTL: -1, MaxStale: time.Minute})
	want := "mirror options: Upstream: required\nUpstreamURL: required\nExternalURL: required\nTTL: must be positive (the profile's mirror.ttl), got -1ns"
	if err == nil || err.Error() != want {
		t.Errorf("New error = %v, want %q", err, want)
	}
}

// Only the clock and the logger are filled in; the profile's durations are
// profile's to default.
func TestDefaults(t *testing.T) {
	got := Options{}.withDefaults()
	if got.TTL != 0 || got.MaxStale != 0 || got.Now == nil || got.Logger == nil {
		t.Errorf("defaults: TTL %s, MaxStale %s, Now set %t, Logger set %t",
			got.TTL, got.MaxStale, got.Now != nil, got.Logger != nil)
	}
}
