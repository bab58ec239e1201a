package inventory

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/testpki"
)

// fleetProfile is a profile with one file spoke, wharf, and [fleet]
// reading the namespace "fleet".
func fleetProfile(t testing.TB) *profile.Profile {
	t.Helper()
	p, err := profile.Parse([]byte(`
default_cluster = "auto"
[controller]
  external_url = "https://crucible.example.com"
[[clusters]]
  name = "wharf"
  server = "https://wharf.example.com:6443"
  ca_file = "/etc/crucible/wharf/ca.crt"
  token_file = "/var/run/secrets/crucible/wharf/token"
  loop_namespace = "loops"
  turn_service_account = "crucible-turn"
  ingest_url = "https://crucible.example.com"
  ingest_audience = "crucible-ingest"
[[clusters]]
  name = "quay"
  server = "https://quay.example.com:6443"
  ca_file = "/etc/crucible/quay/ca.crt"
  token_source = "request"
  token_audience = "quay-audience"
  loop_namespace = "loops"
  turn_service_account = "crucible-turn"
  ingest_url = "https://crucible.example.com"
  ingest_audience = "crucible-ingest"
[fleet]
  cluster_profiles = "fleet"
[fleet.cluster_defaults]
  loop_namespace = "loops"
  turn_service_account = "crucible-turn"
  ingest_url = "https://crucible.example.com"
  ingest_audience = "crucible-ingest"
  capacity = true
`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rendered is the ClusterProfile `crucible render clusterprofile` writes
// for name, with its server and CA.
func rendered(t testing.TB, name, server string, ca []byte) *cpv1alpha1.ClusterProfile {
	t.Helper()
	cp, err := render.ClusterProfile(render.AccessCluster{Name: name, Server: server, CAPEM: ca},
		render.ProfileOptions{Namespace: "fleet", Provider: render.AccessProviderName, ClusterManager: render.ClusterManagerName})
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

func TestSpokeFromRenderedClusterProfile(t *testing.T) {
	ca := testpki.NewCA(t, "dock").PEM
	p := fleetProfile(t)
	cp := rendered(t, "dock", "https://dock.example.com:6443", ca)
	cp.Status.Properties = []cpv1alpha1.Property{
		{Name: profile.PropertyLoopNamespace, Value: "gpu-loops"},
		{Name: "crucible.dev/unknown", Value: "ignored"},
	}
	e, err := Spoke(cp, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case e.Name != "dock" || e.Server != "https://dock.example.com:6443" || string(e.CAData) != string(ca) || e.CAFile != "":
		t.Errorf("where: %+v", e)
	case e.TokenSource != profile.TokenSourceRequest || e.TokenAudience != "dock" || e.TokenExpiration.Duration != profile.DefaultTokenExpiration:
		t.Errorf("token: source %q audience %q expiration %v, want a requested token for dock", e.TokenSource, e.TokenAudience, e.TokenExpiration)
	case e.LoopNamespace != "gpu-loops" || e.TurnServiceAccount != "crucible-turn" || !e.Capacity || e.QPS != profile.DefaultQPS:
		t.Errorf("the defaults and properties: %+v", e)
	}

	// Another consumer's ClusterProfile makes no spoke, and says so.
	other := rendered(t, "pier", "https://pier.example.com", ca)
	other.Status.AccessProviders[0].Name = "kubeconfig"
	if _, err := Spoke(other, p, nil); !errors.Is(err, ErrNotListed) {
		t.Errorf("another provider's: %v, want ErrNotListed", err)
	}
	// The deprecated credentialProviders still count.
	old := rendered(t, "pier", "https://pier.example.com", ca)
	old.Status.CredentialProviders, old.Status.AccessProviders = old.Status.AccessProviders, nil
	if _, err := Spoke(old, p, nil); err != nil {
		t.Errorf("credentialProviders: %v", err)
	}
}

// Whatever a ClusterProfile's writer puts in it, a token goes only to an
// https server its own CA verifies, for an audience that is its own name
// and no spoke's of the file; every refusal names the object and the field.
func TestSpokeRefusesHostileClusterProfiles(t *testing.T) {
	ca := testpki.NewCA(t, "dock").PEM
	p := fleetProfile(t)
	tests := []struct {
		name   string
		change func(cp *cpv1alpha1.ClusterProfile)
		want   string
	}{
		{"no server", func(cp *cpv1alpha1.ClusterProfile) { cluster(cp).Server = "" }, ".server is empty"},
		{"http", func(cp *cpv1alpha1.ClusterProfile) { cluster(cp).Server = "http://dock.example.com" }, "want an https URL"},
		{"user info", func(cp *cpv1alpha1.ClusterProfile) { cluster(cp).Server = "https://u:p@dock.example.com" }, "want an https URL"},
		{"not a URL", func(cp *cpv1alpha1.ClusterProfile) { cluster(cp).Server = "https://%zz" }, "want an https URL"},
		{"skip verify", func(cp *cpv1alpha1.ClusterProfile) { cluster(cp).InsecureSkipTLSVerify = true }, "insecure-skip-tls-verify is set"},
		{"a CA file of the controller's", func(cp *cpv1alpha1.ClusterProfile) {
			cluster(cp).CertificateAuthority = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
		}, "certificate-authority names a file"},
		{"no CA", func(cp *cpv1alpha1.ClusterProfile) { cluster(cp).CertificateAuthorityData = nil }, "certificate-authority-data is empty"},
		{"CA not PEM", func(cp *cpv1alpha1.ClusterProfile) {
			cluster(cp).CertificateAuthorityData = []byte("not a certificate")
		}, "certificate-authority-data:"},
		{"TLS name", func(cp *cpv1alpha1.ClusterProfile) { cluster(cp).TLSServerName = "wharf.example.com" }, "tls-server-name is set"},
		{"proxy", func(cp *cpv1alpha1.ClusterProfile) { cluster(cp).ProxyURL = "http://evil.example.com:3128" }, "proxy-url is set"},
		{"another audience", func(cp *cpv1alpha1.ClusterProfile) {
			cluster(cp).Extensions[0].Extension = runtime.RawExtension{Raw: []byte(`{"cluster":"dock","audience":"wharf"}`)}
		}, `asks for audience "wharf"`},
		{"extension not JSON", func(cp *cpv1alpha1.ClusterProfile) {
			cluster(cp).Extensions[0].Extension = runtime.RawExtension{Raw: []byte(`{`)}
		}, "extensions: client.authentication.k8s.io/exec"},
		{"a file spoke's name", func(cp *cpv1alpha1.ClusterProfile) { cp.Name = "wharf" }, `fleet.cluster_profiles[wharf].name "wharf": duplicate of clusters[0].name`},
		{"a file spoke's audience", func(cp *cpv1alpha1.ClusterProfile) { cp.Name = "quay-audience" }, `token_audience "quay-audience": is clusters[1]'s audience`},
		{"the ingest audience", func(cp *cpv1alpha1.ClusterProfile) { cp.Name = "crucible-ingest" }, `must differ from clusters[0].ingest_audience`},
		{"auto", func(cp *cpv1alpha1.ClusterProfile) { cp.Name = "auto" }, `name "auto": is reserved`},
		{"a name that is no label", func(cp *cpv1alpha1.ClusterProfile) { cp.Name = "dock.example.com" }, "must be a DNS label"},
		{"a loop namespace property that is no label", func(cp *cpv1alpha1.ClusterProfile) {
			cp.Status.Properties = []cpv1alpha1.Property{{Name: profile.PropertyLoopNamespace, Value: "../kube-system"}}
		}, `loop_namespace "../kube-system": must be a DNS label`},
		{"a service account property that is no name", func(cp *cpv1alpha1.ClusterProfile) {
			cp.Status.Properties = []cpv1alpha1.Property{{Name: profile.PropertyTurnServiceAccount, Value: "Turn Account"}}
		}, `turn_service_account "Turn Account"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp := rendered(t, "dock", "https://dock.example.com:6443", ca)
			tt.change(cp)
			_, err := Spoke(cp, p, nil)
			if err == nil || errors.Is(err, ErrNotListed) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "ClusterProfile fleet/"+cp.Name) {
				t.Errorf("Spoke: %v, want a refusal naming ClusterProfile fleet/%s and containing %q", err, cp.Name, tt.want)
			}
		})
	}
}

// With server pins, a ClusterProfile chooses a spoke, never where its token
// goes: only the pinned server and CA, for the name as audience.
func TestSpokeServerPins(t *testing.T) {
	ca, evilCA := testpki.NewCA(t, "dock").PEM, testpki.NewCA(t, "evil").PEM
	p := fleetProfile(t)
	pins := map[string]render.ServerPin{
		"dock": {Name: "dock", Server: "https://dock.example.com:6443", CAData: ca},
		"pier": {Name: "pier", Server: "https://pier.example.com", CAData: ca, Audience: "pier-audience"},
	}
	tests := []struct {
		name, cp, server string
		ca               []byte
		want             string // "" accepted
	}{
		{"pinned", "dock", "https://DOCK.example.com:6443/", ca, ""},
		{"another server", "dock", "https://evil.example.com:6443", ca, `is not the pinned server "https://dock.example.com:6443"`},
		{"another CA", "dock", "https://dock.example.com:6443", evilCA, "not the pinned CA bundle"},
		{"not pinned", "berth", "https://berth.example.com", ca, "no pin for berth in [fleet] server_pins"},
		{"a pin for another audience", "pier", "https://pier.example.com", ca, `allows audience "pier-audience"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Spoke(rendered(t, tt.cp, tt.server, tt.ca), p, pins)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Spoke: %v, want a refusal containing %q", err, tt.want)
			}
		})
	}
}

func cluster(cp *cpv1alpha1.ClusterProfile) *clientcmdv1.Cluster {
	return &cp.Status.AccessProviders[0].Cluster
}

// FuzzSpoke: no status a ClusterProfile's writer can put there panics, and
// whatever is accepted sends the token only to an https server with CA
// data of its own, for the object's name as audience.
func FuzzSpoke(f *testing.F) {
	ca := testpki.NewCA(f, "dock").PEM
	p := fleetProfile(f)
	seed := rendered(f, "dock", "https://dock.example.com:6443", ca)
	f.Add("dock", seed.Status.AccessProviders[0].Cluster.Server, ca, `{"cluster":"dock"}`, "loops", "")
	f.Add("wharf", "https://wharf.example.com", ca, `{"audience":"x"}`, "", "sa")
	f.Add("d", "https://[::1]:6443/p?q", []byte("-----BEGIN CERTIFICATE-----\n"), `{`, "a/b", "..")
	f.Fuzz(func(t *testing.T, name, server string, caData []byte, ext, loopNS, account string) {
		cp := &cpv1alpha1.ClusterProfile{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name}}
		cp.Status.AccessProviders = []cpv1alpha1.AccessProvider{{Name: render.AccessProviderName, Cluster: clientcmdv1.Cluster{
			Server: server, CertificateAuthorityData: caData,
			Extensions: []clientcmdv1.NamedExtension{{Name: execExtensionName, Extension: runtime.RawExtension{Raw: []byte(ext)}}},
		}}}
		cp.Status.Properties = []cpv1alpha1.Property{{Name: profile.PropertyLoopNamespace, Value: loopNS}, {Name: profile.PropertyTurnServiceAccount, Value: account}}
		e, err := Spoke(cp, p, nil)
		if err != nil {
			return
		}
		if !strings.HasPrefix(e.Server, "https://") || len(e.CAData) == 0 || e.TokenAudience != name || e.Name != name ||
			e.TokenSource != profile.TokenSourceRequest || name == "wharf" || name == "quay" || name == "quay-audience" {
			t.Fatalf("accepted %+v", e)
		}
	})
}
