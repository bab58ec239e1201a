package profile

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const examplePath = "../../examples/crucible.toml"

// minimal is the smallest valid profile, as a generic tree the cases edit.
func minimal() map[string]any {
	return map[string]any{
		"controller": map[string]any{"external_url": "https://crucible.example.com"},
		"clusters":   []map[string]any{clusterTree("wharf")},
	}
}

func clusterTree(name string) map[string]any {
	return map[string]any{
		"name":                 name,
		"server":               "https://" + name + ".example.com:6443",
		"ca_file":              "/etc/crucible/" + name + "/ca.crt",
		"token_file":           "/var/run/secrets/crucible/" + name + "/token",
		"loop_namespace":       "loops",
		"turn_service_account": "crucible-turn",
		"ingest_url":           "https://crucible.example.com",
		"ingest_audience":      "crucible-ingest",
	}
}

// table returns the sub-table at key, creating it.
func table(m map[string]any, key string) map[string]any {
	t, ok := m[key].(map[string]any)
	if !ok {
		t = map[string]any{}
		m[key] = t
	}
	return t
}

func cluster(m map[string]any, i int) map[string]any { return m["clusters"].([]map[string]any)[i] }

func encode(t testing.TB, m map[string]any) []byte {
	t.Helper()
	data, err := toml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// wantDefaults is the profile minimal() parses to.
func wantDefaults() *Profile {
	return &Profile{
		Controller: Controller{
			Instance:            "crucible",
			InternalListen:      "127.0.0.1:8080",
			ExternalListen:      "127.0.0.1:8443",
			ExternalURL:         "https://crucible.example.com",
			Store:               "sqlite:crucible.db",
			ArtifactsDir:        "artifacts",
			MaxRequestBytes:     1 << 20,
			MetricsListen:       "127.0.0.1:9090",
			MetricsAllowedHosts: []string{"localhost"},
		},
		API: API{Auth: "none", Namespace: "crucible", ProxyUserHeader: "X-Auth-Request-User", ProxyGroupsHeader: "X-Auth-Request-Groups",
			AllowedHosts: []string{"localhost", "127.0.0.1", "::1"}, TokenAcceptTTL: Duration{10 * time.Second}, TokenNegativeTTL: Duration{5 * time.Second},
			AccessAllowTTL: Duration{10 * time.Second}, AccessDenyTTL: Duration{5 * time.Second}, CacheSize: 10000, PageSize: 500,
			AuthFailuresPerSource: 1, AuthFailureBurst: 20, TokenReviewQPS: 50, TokenReviewBurst: 100, AccessReviewQPS: 50, AccessReviewBurst: 100,
			StreamRecheck: Duration{time.Minute}},
		RunLive: RunLive{MaxSessions: 1000, MaxSessionsPerIdentity: 100, IdleTimeout: Duration{30 * time.Minute}, WriteTimeout: Duration{10 * time.Second},
			MaxSession: Duration{12 * time.Hour}, OpensPerMinute: 60},
		Events: Events{History: 1024, HistoryBytes: 4 << 20, Queue: 1024, QueueBytes: 1 << 20, MaxStreams: 1000, MaxStreamsPerIdentity: 100},
		LeaderElection: LeaderElection{LeaseName: "crucible-leader", LeaseNamespace: "crucible", LeaseDuration: Duration{15 * time.Second},
			RenewDeadline: Duration{10 * time.Second}, RetryPeriod: Duration{2 * time.Second}},
		Mirror: Mirror{TTL: Duration{30 * time.Second}, MaxStale: Duration{10 * time.Minute}},
		Reconcile: Reconcile{
			SweepInterval:  Duration{time.Minute},
			OrphanGrace:    Duration{10 * time.Minute},
			RetryBudget:    Duration{2 * time.Minute},
			MaxBackoff:     Duration{10 * time.Second},
			HealthInterval: Duration{15 * time.Second},
			RetryInitial:   Duration{200 * time.Millisecond},
			Workers:        4,
			SweepPage:      500,
			DrainTimeout:   Duration{10 * time.Minute},
		},
		Pods: Pods{IngestTokenExpiration: Duration{time.Hour}, MaxLogBytes: 64 << 20, Classes: []PodClass{wantDefaultClass()}},
		Live: Live{History: 10000, HistoryBytes: 4 << 20, Buffer: 1024, ViewerBufferBytes: 1 << 20, ReadBytesPerSecond: 1 << 20, WriteTimeout: Duration{10 * time.Second},
			MaxViewers: 1000, MaxViewersPerIdentity: 500, PollInterval: Duration{time.Second}},
		Ingest: Ingest{MaxBodyBytes: 64 << 20, AcceptTTL: Duration{5 * time.Minute}, NegativeTTL: Duration{10 * time.Second},
			CacheSize: 10000, RatePerSource: 20, RateBurst: 40, RatePerPod: 10, RateBurstPerPod: 20, MaxKindsPerPod: 32, MaxBytesPerPod: 1 << 30, MinFreeBytes: 1 << 30,
			MaxTotalBytes: 100 << 30, MaxBytesPerSubmitter: 25 << 30, MaxBytesPerCluster: 50 << 30, MaxStagingPerPod: 2, MinUploadRate: 4 << 10, UploadRateWindow: Duration{30 * time.Second}},
		DefaultCluster: "wharf",
		Clusters: []ClusterEntry{{
			Name:               "wharf",
			Server:             "https://wharf.example.com:6443",
			CAFile:             "/etc/crucible/wharf/ca.crt",
			TokenSource:        "file",
			TokenFile:          "/var/run/secrets/crucible/wharf/token",
			LoopNamespace:      "loops",
			TurnServiceAccount: "crucible-turn",
			IngestURL:          "https://crucible.example.com",
			IngestAudience:     "crucible-ingest",
			QPS:                500,
			Burst:              1000,
			RunLivePort:        7777,
			RunLivePorts:       []int{7777},
		}},
	}
}

func TestParseDefaults(t *testing.T) {
	got, err := Parse(encode(t, minimal()))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantDefaults(), got); diff != "" {
		t.Errorf("Parse(minimal) (-want +got):\n%s", diff)
	}
}

func TestParseExplicitValuesKept(t *testing.T) {
	m := minimal()
	table(m, "mirror")["ttl"] = "5s"
	table(m, "reconcile")["max_backoff"] = "1s"
	table(m, "pods")["ingest_token_expiration"] = "10m"
	table(table(m, "pods"), "node_selector")["kubernetes.io/arch"] = "amd64"
	cluster(m, 0)["qps"] = 2.5
	cluster(m, 0)["burst"] = 3
	table(m, "ingest")["rate_per_pod"] = 2.5
	table(m, "ingest")["rate_burst_per_pod"] = 5
	table(m, "ingest")["max_kinds_per_pod"] = 4
	table(m, "ingest")["upload_rate_window"] = "1m"
	got, err := Parse(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	want := wantDefaults()
	want.Mirror.TTL = Duration{5 * time.Second}
	want.Reconcile.MaxBackoff = Duration{time.Second}
	want.Pods.IngestTokenExpiration = Duration{10 * time.Minute}
	want.Pods.NodeSelector = map[string]string{"kubernetes.io/arch": "amd64"}
	want.Clusters[0].QPS = 2.5
	want.Clusters[0].Burst = 3
	want.Ingest.RatePerPod = 2.5
	want.Ingest.RateBurstPerPod = 5
	want.Ingest.MaxKindsPerPod = 4
	want.Ingest.UploadRateWindow = Duration{time.Minute}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLoadExample(t *testing.T) {
	got, err := Load(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	want := &Profile{
		Controller: Controller{
			Instance:            "crucible",
			InternalListen:      "127.0.0.1:8080",
			ExternalListen:      "0.0.0.0:8443",
			ExternalURL:         "https://crucible-ext.hub.example.com",
			ExternalTLSCert:     "/etc/crucible/external-tls/tls.crt",
			ExternalTLSKey:      "/etc/crucible/external-tls/tls.key",
			Store:               "sqlite:crucible.db",
			ArtifactsDir:        "artifacts",
			MaxRequestBytes:     1 << 20,
			MetricsListen:       "127.0.0.1:9090",
			MetricsAllowedHosts: []string{"localhost"},
		},
		API:            wantDefaults().API,
		Events:         wantDefaults().Events,
		RunLive:        wantDefaults().RunLive,
		LeaderElection: wantDefaults().LeaderElection,
		Live:           wantDefaults().Live,
		Mirror:         Mirror{TTL: Duration{30 * time.Second}, MaxStale: Duration{10 * time.Minute}},
		Reconcile:      wantDefaults().Reconcile,
		Pods: Pods{
			IngestTokenExpiration: Duration{time.Hour},
			ImagePullPolicy:       "IfNotPresent",
			MaxLogBytes:           64 << 20,
			Classes:               []PodClass{wantDefaultClass(), wantExampleGPUClass()},
		},
		Ingest: Ingest{MaxBodyBytes: 64 << 20, AcceptTTL: Duration{5 * time.Minute}, NegativeTTL: Duration{10 * time.Second},
			CacheSize: 10000, RatePerSource: 20, RateBurst: 40, RatePerPod: 10, RateBurstPerPod: 20, TrustedProxies: []string{"10.128.0.0/14"},
			MaxKindsPerPod: 32, MaxBytesPerPod: 1 << 30, MinFreeBytes: 1 << 30, MaxTotalBytes: 100 << 30, MaxBytesPerSubmitter: 25 << 30, MaxBytesPerCluster: 50 << 30, MaxStagingPerPod: 2, MinUploadRate: 4 << 10,
			UploadRateWindow: Duration{30 * time.Second}},
		DefaultCluster: "wharf",
		Clusters: []ClusterEntry{{
			Name:               "wharf",
			Server:             "https://api.wharf.example.com:6443",
			CAFile:             "/etc/crucible/wharf/ca.crt",
			TokenSource:        "file",
			TokenFile:          "/var/run/secrets/crucible/wharf/token",
			LoopNamespace:      "loops",
			TurnServiceAccount: "crucible-turn",
			IngestURL:          "https://crucible-ext.hub.example.com",
			IngestAudience:     "crucible-ingest",
			QPS:                500,
			Burst:              1000,
			RunLivePort:        7777,
			RunLivePorts:       []int{7777},
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load(%s) (-want +got):\n%s", examplePath, diff)
	}
}

var update = flag.Bool("update", false, "rewrite the expected outcomes in testdata/profiles from what Parse returns")

// goldenCases is a floor on the number of testdata/profiles cases, so that
// a moved directory fails instead of testing nothing.
const goldenCases = 72

// Every testdata/profiles/<case>.toml parses to what is next to it: the
// problems in <case>.err, one per line, or, when it is valid, the profile
// in <case>.golden (the parsed, defaulted profile as TOML). go test -update
// rewrites them from what Parse returns; review the diff.
func TestParseGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "profiles", "*.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < goldenCases {
		t.Fatalf("found %d cases in testdata/profiles, want at least %d", len(inputs), goldenCases)
	}
	for _, input := range inputs {
		stem := strings.TrimSuffix(input, ".toml")
		t.Run(filepath.Base(stem), func(t *testing.T) {
			data, err := os.ReadFile(input)
			if err != nil {
				t.Fatal(err)
			}
			got, ext := parseOutcome(t, data)
			want, other := stem+ext, stem+".golden"
			if ext == ".golden" {
				other = stem + ".err"
			}
			if *update {
				writeGolden(t, want, other, got)
				return
			}
			if _, err := os.Stat(other); err == nil {
				t.Errorf("%s exists, but Parse gave %s", other, want)
			}
			wantData, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("%v (go test -run TestParseGolden -update writes it)", err)
			}
			if diff := cmp.Diff(string(wantData), got); diff != "" {
				t.Errorf("%s (-want +got; go test -run TestParseGolden -update rewrites it):\n%s", want, diff)
			}
		})
	}
}

// parseOutcome parses data and renders the result as the golden file holds
// it, with that file's extension.
func parseOutcome(t *testing.T, data []byte) (string, string) {
	t.Helper()
	p, err := Parse(data)
	if err == nil {
		if err := p.Validate(); err != nil {
			t.Fatalf("Validate after Parse: %v", err)
		}
		out, err := toml.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(out), ".golden"
	}
	if p != nil {
		t.Errorf("Parse returned a profile with an error")
	}
	if !errors.Is(err, ErrInvalidProfile) {
		t.Fatalf("Parse error %v does not wrap ErrInvalidProfile", err)
	}
	perr, ok := errors.AsType[*ProfileError](err)
	if !ok {
		t.Fatalf("Parse error %T is not a *ProfileError", err)
	}
	return strings.Join(perr.Problems(), "\n") + "\n", ".err"
}

// writeGolden writes path and removes other, the outcome a case no longer
// has.
func writeGolden(t *testing.T, path, other, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(other); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

// The walker speaks the validation's vocabulary: unknown keys are
// Forbidden, values of the wrong TOML type TypeInvalid, unusable values
// Invalid, each with its key path, array indexes included.
func TestParseErrorTypes(t *testing.T) {
	m := minimal()
	table(m, "controller")["listen"] = ":80"
	table(m, "mirror")["ttl"] = "soon"
	cluster(m, 0)["burst"] = "many"
	cluster(m, 0)["qps"] = 1e39
	table(m, "api")["allowed_hosts"] = []any{"ok", 1}
	_, err := Parse(encode(t, m))
	perr, ok := errors.AsType[*ProfileError](err)
	if !ok {
		t.Fatalf("Parse: %v, want a *ProfileError", err)
	}
	type finding struct {
		Type  field.ErrorType
		Field string
	}
	want := []finding{
		{field.ErrorTypeTypeInvalid, "api.allowed_hosts[1]"},
		{field.ErrorTypeTypeInvalid, "clusters[0].burst"},
		{field.ErrorTypeInvalid, "clusters[0].qps"},
		{field.ErrorTypeForbidden, "controller.listen"},
		{field.ErrorTypeInvalid, "mirror.ttl"},
	}
	var got []finding
	for _, e := range perr.Errs {
		got = append(got, finding{e.Type, e.Field})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if perr.Syntax != "" {
		t.Errorf("Syntax = %q, want none", perr.Syntax)
	}
}

func TestParseTooLarge(t *testing.T) {
	_, err := Parse(make([]byte, MaxProfileBytes+1))
	if diff := cmp.Diff("invalid profile: larger than 1048576 bytes", errString(err)); diff != "" {
		t.Error(diff)
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	m := minimal()
	delete(cluster(m, 0), "token_file")
	table(m, "controller")["listen"] = "x"
	if err := os.WriteFile(bad, encode(t, m), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, make([]byte, MaxProfileBytes+10), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string
		invalid    bool
	}{
		{
			path:    bad,
			want:    "invalid profile " + bad + ":\n  controller.listen: unknown key\n  clusters[0].token_file: required",
			invalid: true,
		},
		{path: big, want: "invalid profile " + big + ": larger than 1048576 bytes", invalid: true},
		{path: filepath.Join(dir, "missing.toml"), want: "read profile: open " + filepath.Join(dir, "missing.toml") + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			p, err := Load(tt.path)
			if p != nil {
				t.Error("Load returned a profile with an error")
			}
			if diff := cmp.Diff(tt.want, errString(err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got := errors.Is(err, ErrInvalidProfile); got != tt.invalid {
				t.Errorf("errors.Is(err, ErrInvalidProfile) = %v, want %v", got, tt.invalid)
			}
		})
	}
}

func TestValidateProgrammaticProfile(t *testing.T) {
	p := wantDefaults()
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate(defaults): %v", err)
	}
	p.Clusters[0].QPS = 0
	p.Controller.Instance = ""
	err := p.Validate()
	want := "invalid profile:\n  controller.instance \"\": must be a DNS label\n  clusters[0].qps \"0\": must be positive"
	if diff := cmp.Diff(want, errString(err)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCluster(t *testing.T) {
	m := minimal()
	m["clusters"] = append(m["clusters"].([]map[string]any), clusterTree("dock"))
	m["default_cluster"] = "dock"
	p, err := Parse(encode(t, m))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		wantName string
		wantOK   bool
	}{
		{name: "", wantName: "dock", wantOK: true},
		{name: "wharf", wantName: "wharf", wantOK: true},
		{name: "dock", wantName: "dock", wantOK: true},
		{name: "nope"},
		{name: "Wharf"},
	}
	for _, tt := range tests {
		got, ok := p.Cluster(tt.name)
		if ok != tt.wantOK || got.Name != tt.wantName {
			t.Errorf("Cluster(%q) = %q, %v; want %q, %v", tt.name, got.Name, ok, tt.wantName, tt.wantOK)
		}
	}

	single, err := Parse(encode(t, minimal()))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := single.Cluster(""); !ok || got.Name != "wharf" {
		t.Errorf("single cluster: Cluster(\"\") = %q, %v; want wharf, true", got.Name, ok)
	}
	var empty Profile
	if got, ok := empty.Cluster(""); ok {
		t.Errorf("empty profile: Cluster(\"\") = %q, true; want false", got.Name)
	}
}

func TestDurationText(t *testing.T) {
	var d Duration
	if err := d.UnmarshalText([]byte("1h30m")); err != nil {
		t.Fatal(err)
	}
	if d.Duration != 90*time.Minute {
		t.Errorf("UnmarshalText(1h30m) = %s", d.Duration)
	}
	text, err := d.MarshalText()
	if err != nil || string(text) != "1h30m0s" {
		t.Errorf("MarshalText = %q, %v; want 1h30m0s", text, err)
	}
	if err := d.UnmarshalText([]byte("90")); err == nil {
		t.Error("UnmarshalText(90) succeeded; want an error (no unit)")
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// wantDefaultClass is the class of a profile that defines none, spelt out
// (not defaultClass()) so that a changed default fails here.
func wantDefaultClass() PodClass {
	mem := Quantity{resource.MustParse("1Gi")}
	return PodClass{
		Name: "standard", DefaultFor: []string{"loop", "turn"},
		Requests:    map[string]Quantity{"cpu": {resource.MustParse("500m")}, "memory": mem},
		Limits:      map[string]Quantity{"memory": mem},
		GPUResource: "nvidia.com/gpu", Deadline: Duration{6 * time.Hour}, MaxDeadline: Duration{48 * time.Hour},
		RunAsUser: 65532, RunAsGroup: 65532,
	}
}

// wantExampleGPUClass is examples/crucible.toml's gpu class.
func wantExampleGPUClass() PodClass {
	q := func(s string) Quantity { return Quantity{resource.MustParse(s)} }
	return PodClass{
		Name: "gpu", GPUs: 1, GPUResource: "nvidia.com/gpu", Groups: []string{"ml-platform"},
		Requests:     map[string]Quantity{"cpu": q("8"), "memory": q("32Gi")},
		Limits:       map[string]Quantity{"memory": q("32Gi")},
		Tolerations:  []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
		NodeSelector: map[string]string{"nvidia.com/gpu.present": "true"},
		Shm:          q("8Gi"), Deadline: Duration{12 * time.Hour}, MaxDeadline: Duration{72 * time.Hour},
		RunAsUser: 65532, RunAsGroup: 65532,
		Allow: ClassAllow{GPUs: IntRange{Min: 1, Max: 8}, Resources: map[string]QuantityRange{
			"cpu": {Max: q("64")}, "memory": {Max: q("256Gi")},
		}},
	}
}
