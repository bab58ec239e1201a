package profile

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Default has exactly the defaults Parse applies: every section a consumer
// takes from it is the one a profile that leaves the section out gets.
func TestDefaultIsWhatParseApplies(t *testing.T) {
	parsed, err := Parse(encode(t, minimal()))
	if err != nil {
		t.Fatal(err)
	}
	want := *parsed
	want.Controller.ExternalURL = "" // what minimal() sets
	want.Clusters, want.DefaultCluster = nil, ""
	if diff := cmp.Diff(want, Default()); diff != "" {
		t.Errorf("Default() (-want Parse(minimal) without its own keys, +got):\n%s", diff)
	}
}

// The keys that moved into the profile from their consumers are validated
// like the others: a negative value is refused by its path, an explicit
// zero takes the default, and the first backoff may not pass its cap.
func TestValidateMovedKeys(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Profile)
		want []string
	}{
		{"defaults", func(*Profile) {}, nil},
		{"negative", func(p *Profile) {
			p.Reconcile.RetryInitial.Duration, p.Reconcile.Workers, p.Reconcile.SweepPage = -time.Second, -1, -2
			p.Pods.MaxLogBytes = -3
			p.Live.History, p.Live.Buffer, p.Live.PollInterval.Duration = -4, -5, -time.Second
		}, []string{
			`reconcile.retry_initial "-1s": must be positive`,
			`reconcile.workers "-1": must be positive`,
			`reconcile.sweep_page "-2": must be positive`,
			`pods.max_log_bytes "-3": must be positive`,
			`live.history "-4": must be positive`,
			`live.buffer "-5": must be positive`,
			`live.poll_interval "-1s": must be positive`,
		}},
		{"negative live budgets", func(p *Profile) {
			p.Live.HistoryBytes, p.Live.ViewerBufferBytes, p.Live.WriteTimeout.Duration = -1, -2, -time.Second
			p.Live.MaxViewers, p.Live.MaxViewersPerIdentity, p.Live.ReadBytesPerSecond = -3, -4, -5
		}, []string{
			`live.history_bytes "-1": must be positive`,
			`live.viewer_buffer_bytes "-2": must be positive`,
			`live.read_bytes_per_second "-5": must be positive`,
			`live.write_timeout "-1s": must be positive`,
			`live.max_viewers "-3": must be positive`,
			`live.max_viewers_per_identity "-4": must be positive`,
		}},
		{"per-identity cap above the cap", func(p *Profile) { p.Live.MaxViewers, p.Live.MaxViewersPerIdentity = 10, 11 }, []string{
			`live.max_viewers_per_identity "11": must not exceed live.max_viewers`,
		}},
		{"negative budgets of issue 23", func(p *Profile) {
			p.Events.History, p.Events.HistoryBytes, p.Events.Queue, p.Events.QueueBytes = -1, -2, -3, -4
			p.Events.MaxStreams, p.Events.MaxStreamsPerIdentity = -5, -6
			p.API.AuthFailuresPerSource, p.API.AuthFailureBurst = -1, -2
			p.API.TokenReviewQPS, p.API.TokenReviewBurst, p.API.AccessReviewQPS, p.API.AccessReviewBurst = -3, -4, -5, -6
			p.API.StreamRecheck.Duration = -time.Second
			p.Ingest.MaxTotalBytes = -7
		}, []string{
			`ingest.max_total_bytes "-7": must be positive`,
			`api.auth_failures_per_source "-1": must be positive`,
			`api.auth_failure_burst "-2": must be positive`,
			`api.token_review_qps "-3": must be positive`,
			`api.token_review_burst "-4": must be positive`,
			`api.access_review_qps "-5": must be positive`,
			`api.access_review_burst "-6": must be positive`,
			`api.stream_recheck "-1s": must be positive`,
			`events.history "-1": must be positive`,
			`events.history_bytes "-2": must be positive`,
			`events.queue "-3": must be positive`,
			`events.queue_bytes "-4": must be positive`,
			`events.max_streams "-5": must be positive`,
			`events.max_streams_per_identity "-6": must be positive`,
		}},
		{"events per-identity cap above the cap", func(p *Profile) { p.Events.MaxStreams, p.Events.MaxStreamsPerIdentity = 10, 11 }, []string{
			`events.max_streams_per_identity "11": must not exceed events.max_streams`,
		}},
		{"hosts, prefixes and the proxy CA", func(p *Profile) {
			p.Controller.MetricsAllowedHosts = []string{"ok.example", "bad host", "h:1"}
			p.Pods.MetadataPrefixes = []string{"example.com/", "example.com", "/", "Bad_/", "a.b/"}
			p.API.ProxyClientCA = "/etc/ca.crt"
		}, []string{
			`controller.metrics_allowed_hosts[1] "bad host": must be a host name or IP address without a port`,
			`controller.metrics_allowed_hosts[2] "h:1": must be a host name or IP address without a port`,
			`pods.metadata_prefixes[1] "example.com": must be a DNS subdomain followed by "/", e.g. "example.com/"`,
			`pods.metadata_prefixes[2] "/": must be a DNS subdomain followed by "/", e.g. "example.com/"`,
			`pods.metadata_prefixes[3] "Bad_/": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
			`api.proxy_client_ca: only used with api.auth "proxy"`,
		}},
		{"proxy client names without the proxy CA, and an empty one", func(p *Profile) {
			p.API.ProxyClientNames = []string{"oauth2-proxy", ""}
		}, []string{
			`api.proxy_client_names: only used with api.proxy_client_ca`,
			`api.proxy_client_names[1] "": must not be empty`,
		}},
		{"run-live session bounds", func(p *Profile) {
			p.RunLive.MaxSession.Duration, p.RunLive.OpensPerMinute = -time.Second, -1
		}, []string{
			`run_live.max_session "-1s": must be positive`,
			`run_live.opens_per_minute "-1": must be positive`,
		}},
		{"first backoff above the cap", func(p *Profile) { p.Reconcile.RetryInitial.Duration = 11 * time.Second }, []string{
			`reconcile.retry_initial "11s": must not exceed reconcile.max_backoff`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wantDefaults()
			tt.edit(p)
			var got []string
			for _, e := range validateProfile(p) {
				got = append(got, problemText(e))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// A profile that sets the moved keys keeps them; one that sets them to 0
// gets the defaults.
func TestParseMovedKeys(t *testing.T) {
	m := minimal()
	table(m, "reconcile")["workers"] = 8
	table(m, "reconcile")["sweep_page"] = 0
	table(m, "reconcile")["retry_initial"] = "1s"
	table(m, "pods")["max_log_bytes"] = 1 << 20
	table(m, "live")["history"] = 50
	table(m, "live")["poll_interval"] = "250ms"
	p, err := Parse(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	got := []any{p.Reconcile.Workers, p.Reconcile.SweepPage, p.Reconcile.RetryInitial.Duration, p.Pods.MaxLogBytes,
		p.Live.History, p.Live.Buffer, p.Live.PollInterval.Duration}
	want := []any{8, int64(DefaultSweepPage), time.Second, int64(1 << 20), 50, DefaultLiveBuffer, 250 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	table(m, "live")["histroy"] = 1
	if _, err := Parse(encode(t, m)); err == nil || !strings.Contains(err.Error(), "live.histroy") {
		t.Errorf("Parse with a misspelt [live] key = %v, want it refused", err)
	}
}
