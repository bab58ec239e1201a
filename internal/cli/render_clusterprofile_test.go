package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpcredentials "sigs.k8s.io/cluster-inventory-api/pkg/credentials"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/render"
)

// clusterProfileFixture is the example profile with wharf's ca_file at a
// file that exists, holding caPEM.
func clusterProfileFixture(t *testing.T, caPEM string) string {
	t.Helper()
	dir := t.TempDir()
	ca := filepath.Join(dir, "wharf-ca.crt")
	if err := os.WriteFile(ca, []byte(caPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exampleProfile)
	if err != nil {
		t.Fatal(err)
	}
	profile := strings.ReplaceAll(string(data), "/etc/crucible/wharf/ca.crt", ca)
	path := filepath.Join(dir, "crucible.toml")
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// What render clusterprofile prints, read back by the consumer library with
// the provider file the same command prints, gives `crucible credential`
// an exec info whose spec.cluster.config names wharf and nothing else.
func TestRenderClusterProfileRoundTrip(t *testing.T) {
	ca := testCA(t, "wharf-ca")
	profile := clusterProfileFixture(t, string(ca))
	var out, errOut bytes.Buffer
	if err := Run(t.Context(), []string{"render", "clusterprofile", "--config", profile, "--namespace", "kueue-system"}, &out, &errOut); err != nil {
		t.Fatalf("render: %v\n%s", err, errOut.String())
	}
	var cp cpv1alpha1.ClusterProfile
	if err := yaml.UnmarshalStrict(out.Bytes(), &cp); err != nil {
		t.Fatalf("decode %s: %v", out.String(), err)
	}
	out.Reset()
	if err := Run(t.Context(), []string{"render", "clusterprofile", "--provider-file"}, &out, &errOut); err != nil {
		t.Fatalf("render --provider-file: %v\n%s", err, errOut.String())
	}
	file := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	providers, err := cpcredentials.NewFromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := providers.BuildConfigFromCP(&cp)
	if err != nil {
		t.Fatalf("BuildConfigFromCP: %v", err)
	}
	raw, ok := cfg.ExecProvider.Config.(*runtime.Unknown)
	if !ok {
		t.Fatalf("exec config = %T; want the extension's JSON", cfg.ExecProvider.Config)
	}
	got, err := parseClusterConfig(raw.Raw)
	if err != nil {
		t.Fatalf("crucible credential refuses the rendered extension: %v", err)
	}
	if diff := cmp.Diff(clusterConfig{Cluster: "wharf"}, got); diff != "" {
		t.Errorf("cluster config (-want +got):\n%s", diff)
	}
	want := []string{"kueue-system/wharf", "https://api.wharf.example.com:6443", "/var/run/crucible/bin/crucible", string(ca),
		"credential --server-pins /etc/crucible/clusterprofile/server-pins.json"}
	if diff := cmp.Diff(want, []string{cp.Namespace + "/" + cp.Name, cfg.Host, cfg.ExecProvider.Command, string(cfg.CAData), strings.Join(cfg.ExecProvider.Args, " ")}); diff != "" {
		t.Errorf("ClusterProfile (-want +got):\n%s", diff)
	}

	// The pins render prints for the same profile pass the exec info
	// client-go builds from that ClusterProfile.
	out.Reset()
	if err := Run(t.Context(), []string{"render", "clusterprofile", "--server-pins", "--config", profile}, &out, &errOut); err != nil {
		t.Fatalf("render --server-pins: %v\n%s", err, errOut.String())
	}
	pins := writeFile(t, t.TempDir(), "server-pins.json", out.String())
	dir := t.TempDir()
	token := saTokenFor(t, []string{"wharf"}, credNow.Add(time.Hour))
	writeFile(t, dir, "wharf/token", token)
	info := execInfoFor(t, clientauthv1.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}, string(raw.Raw))
	cred, err := credential(info, credentialFlags{tokenDir: dir, serverPins: pins}, credNow)
	if err != nil {
		t.Fatalf("credential with the rendered pins: %v", err)
	}
	if decodeCredential(t, cred).Status.Token != token {
		t.Errorf("credential %s", cred)
	}
}

// Each refusal names the flag or the file at fault, and prints nothing.
func TestRenderClusterProfileRefusals(t *testing.T) {
	profile := clusterProfileFixture(t, "PEM")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no config", nil, "--config: required"},
		{"no config for the consumer", []string{"--consumer-values"}, "--config: required"},
		{"unknown cluster", []string{"--config", profile, "--cluster", "dock"}, `--cluster "dock": no such cluster`},
		{"bad namespace", []string{"--config", profile, "--namespace", "Kueue_System"}, `--namespace, --provider-name, --cluster-manager: namespace "Kueue_System"`},
		{"bad provider name", []string{"--config", profile, "--provider-name", "Crucible"}, `provider name "Crucible"`},
		{"bad cluster manager", []string{"--config", profile, "--cluster-manager", "a/b"}, `cluster manager "a/b"`},
		{"missing ca_file", []string{"--config", exampleProfile}, "cluster wharf: ca_file: open /etc/crucible/wharf/ca.crt"},
		{"empty command", []string{"--provider-file", "--command", ""}, "--provider-name, --command, --server-pins-path: provider command: must not be empty"},
		{"relative pins path", []string{"--provider-file", "--server-pins-path", "pins.json"}, `server pins path "pins.json"`},
		{"pins without config", []string{"--server-pins"}, "--config: required"},
		{"pins of a CA that is not PEM", []string{"--server-pins", "--config", profile}, "--server-pins: cluster wharf: CA: not a PEM bundle of certificates"},
		{"--namespace for the pins", []string{"--server-pins", "--config", profile, "--namespace", "x"}, "--namespace: not used by --server-pins (it reads --cluster, --audience)"},
		{"relative command", []string{"--provider-file", "--command", "bin/crucible"}, `provider command "bin/crucible"`},
		{"audience without =", []string{"--config", profile, "--audience", "wharf"}, `--audience "wharf": want NAME=AUDIENCE`},
		{"audience of another cluster", []string{"--config", profile, "--audience", "dock=d"}, `--audience "dock=d": dock is not one of the clusters rendered`},
		{"audience twice", []string{"--config", profile, "--audience", "wharf=a", "--audience", "wharf=b"}, `--audience "wharf=b": wharf given twice`},
		{"both modes", []string{"--provider-file", "--consumer-values"}, "--consumer-values, --provider-file: one of them only"},
		{"pins and provider file", []string{"--provider-file", "--server-pins"}, "--provider-file, --server-pins: one of them only"},
		{"--cluster with --provider-file", []string{"--provider-file", "--cluster", "wharf"},
			"--cluster: not used by --provider-file (it reads --provider-name, --command, --server-pins-path)"},
		{"--command for ClusterProfiles", []string{"--config", profile, "--command", "/x/crucible", "--image", "r/c:1"},
			"--command, --image: not used by the ClusterProfiles"},
		{"--namespace for the consumer", []string{"--config", profile, "--consumer-values", "--namespace", "kueue-system"},
			"--namespace: not used by --consumer-values"},
		{"consumer without an image", []string{"--config", profile, "--consumer-values"},
			`--consumer-values (--command, --token-dir, --image or [pods] push_image): image: required with the command "/var/run/crucible/bin/crucible"`},
		{"consumer token dir", []string{"--config", profile, "--consumer-values", "--command", "crucible", "--token-dir", "tokens"}, `token dir "tokens"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := Run(t.Context(), append([]string{"render", "clusterprofile"}, tc.args...), &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want it to contain %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
}

// twoSpokeProfile is the example profile with wharf's ca_file readable, a
// second spoke dock (with wharf's CA), and podsExtra spliced into its [pods] table.
func twoSpokeProfile(t *testing.T, podsExtra string) string {
	t.Helper()
	path := clusterProfileFixture(t, "PEM")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	profile := strings.Replace(string(data), "\n[pods]\n", "\n[pods]\n"+podsExtra, 1) + `
[[clusters]]
name = "dock"
server = "https://api.dock.example.com:6443"
ca_file = "` + filepath.Join(filepath.Dir(path), "wharf-ca.crt") + `"
token_file = "/var/run/secrets/crucible/dock/token"
loop_namespace = "loops"
turn_service_account = "crucible-turn"
ingest_url = "https://crucible-ext.hub.example.com"
ingest_audience = "crucible-ingest"
`
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// consumerSnippet is the --consumer-values output decoded strictly as the
// pod-spec types a consumer's chart puts them in.
type consumerSnippet struct {
	InitContainers []corev1.Container   `json:"initContainers"`
	Volumes        []corev1.Volume      `json:"volumes"`
	VolumeMounts   []corev1.VolumeMount `json:"volumeMounts"`
	Env            []corev1.EnvVar      `json:"env"`
}

// --consumer-values prints fragments that parse as corev1 volumes, mounts
// and containers: one token per spoke, for the audience --audience gives
// (else the spoke's name), at the layout credential reads; the init
// container from the profile's push_image (or --image) filling the
// command's directory; CRUCIBLE_TOKEN_DIR only when the layout moves.
func TestRenderClusterProfileConsumerValues(t *testing.T) {
	profile := twoSpokeProfile(t, "push_image = \"registry.example.com/crucible:v7\"\n")
	for _, tc := range []struct {
		name      string
		args      []string
		wantImage string // "" means no init container
		wantDir   string
		wantEnv   []corev1.EnvVar
	}{
		{"defaults", nil, "registry.example.com/crucible:v7", "/var/run/secrets/crucible", nil},
		{"--image over push_image", []string{"--image", "mirror.example.com/crucible:v7"}, "mirror.example.com/crucible:v7", "/var/run/secrets/crucible", nil},
		{"own binary, own token dir", []string{"--command", "crucible", "--token-dir", "/tokens"}, "", "/tokens",
			[]corev1.EnvVar{{Name: "CRUCIBLE_TOKEN_DIR", Value: "/tokens"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"render", "clusterprofile", "--config", profile, "--consumer-values", "--audience", "dock=https://dock.example.com"}, tc.args...)
			if err := Run(t.Context(), args, &out, &errOut); err != nil {
				t.Fatalf("render: %v\n%s", err, errOut.String())
			}
			if !strings.HasPrefix(out.String(), "# ") || !strings.Contains(out.String(), "--clusterprofile-provider-file=/etc/crucible/clusterprofile/providers.json") {
				t.Errorf("no header naming the provider file:\n%s", out.String())
			}
			var got consumerSnippet
			if err := yaml.UnmarshalStrict(out.Bytes(), &got); err != nil {
				t.Fatalf("decode %s: %v", out.String(), err)
			}
			audiences := map[string]string{}
			for _, v := range got.Volumes {
				if p := v.Projected; p != nil {
					audiences[v.Name] = p.Sources[0].ServiceAccountToken.Audience
				}
			}
			if diff := cmp.Diff(map[string]string{"crucible-token-wharf": "wharf", "crucible-token-dock": "https://dock.example.com"}, audiences); diff != "" {
				t.Errorf("token volumes by audience (-want +got):\n%s", diff)
			}
			mounts := map[string]string{}
			for _, m := range got.VolumeMounts {
				mounts[m.Name] = m.MountPath
			}
			wantMounts := map[string]string{
				"crucible-token-wharf": tc.wantDir + "/wharf", "crucible-token-dock": tc.wantDir + "/dock",
				"crucible-providers": "/etc/crucible/clusterprofile",
			}
			var image string
			if len(got.InitContainers) > 0 {
				image = got.InitContainers[0].Image
				wantMounts["crucible-bin"] = "/var/run/crucible/bin"
			}
			if diff := cmp.Diff(wantMounts, mounts); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
			if image != tc.wantImage || len(got.InitContainers) > 1 {
				t.Errorf("init containers %+v; want one of image %q (none if empty)", got.InitContainers, tc.wantImage)
			}
			if diff := cmp.Diff(tc.wantEnv, got.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

// --audience reaches the ClusterProfile's extension, where credential
// reads it; --cluster-manager and --provider-name reach every place they
// name, and the provider file names the same provider.
func TestRenderClusterProfileNames(t *testing.T) {
	profile := twoSpokeProfile(t, "")
	var out, errOut bytes.Buffer
	if err := Run(t.Context(), []string{"render", "clusterprofile", "--config", profile, "--cluster", "dock", "--audience", "dock=https://dock.example.com",
		"--provider-name", "crucible-prod", "--cluster-manager", "fleet.example.com"}, &out, &errOut); err != nil {
		t.Fatalf("render: %v\n%s", err, errOut.String())
	}
	var cp cpv1alpha1.ClusterProfile
	if err := yaml.UnmarshalStrict(out.Bytes(), &cp); err != nil {
		t.Fatalf("decode %s: %v", out.String(), err)
	}
	ap := cp.Status.AccessProviders[0]
	cfg, err := parseClusterConfig(ap.Cluster.Extensions[0].Extension.Raw)
	if err != nil {
		t.Fatalf("crucible credential refuses the rendered extension: %v", err)
	}
	got := []string{cp.Name, cp.Labels["x-k8s.io/cluster-manager"], cp.Spec.ClusterManager.Name, ap.Name, cfg.Cluster, *cfg.Audience}
	want := []string{"dock", "fleet.example.com", "fleet.example.com", "crucible-prod", "dock", "https://dock.example.com"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClusterProfile (-want +got):\n%s", diff)
	}
	out.Reset()
	if err := Run(t.Context(), []string{"render", "clusterprofile", "--provider-file", "--provider-name", "crucible-prod"}, &out, &errOut); err != nil {
		t.Fatalf("render --provider-file: %v", err)
	}
	var file cpcredentials.CredentialsProvider
	if err := json.Unmarshal(out.Bytes(), &file); err != nil || len(file.Providers) != 1 || file.Providers[0].Name != "crucible-prod" {
		t.Errorf("provider file %s (%v); want the one provider crucible-prod", out.String(), err)
	}
}

// render's default token directory is the one credential reads without
// CRUCIBLE_TOKEN_DIR: the consumer values leave the variable out only
// because the two agree.
func TestRenderClusterProfileTokenDirIsCredentials(t *testing.T) {
	if render.ConsumerTokenDir != defaultTokenDir || render.EnvTokenDir != tokenDirEnv {
		t.Errorf("render's %s=%s, credential's %s=%s", render.EnvTokenDir, render.ConsumerTokenDir, tokenDirEnv, defaultTokenDir)
	}
}
