package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/serverpin"
)

// testCA is a self-signed CA certificate's PEM.
func testCA(t *testing.T, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: credNow.Add(-time.Hour), NotAfter: credNow.Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// execInfoFor is the exec info client-go sends for cluster c with the
// extension config.
func execInfoFor(t *testing.T, c clientauthv1.Cluster, config string) string {
	t.Helper()
	c.Config = runtime.RawExtension{Raw: []byte(config)}
	data, err := json.Marshal(clientauthv1.ExecCredential{
		TypeMeta: metav1.TypeMeta{APIVersion: v1Info, Kind: "ExecCredential"},
		Spec:     clientauthv1.ExecCredentialSpec{Cluster: &c},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// pinsFile writes pins as a --server-pins file.
func pinsFile(t *testing.T, pins ...render.ServerPin) string {
	t.Helper()
	data, err := json.Marshal(render.ServerPins{Clusters: pins})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, t.TempDir(), "server-pins.json", string(data))
}

// The token goes only to the server the consumer pinned, verified by the
// pinned CAs, compared as client-go dials it: spellings of the same URL are
// one server; another host, port, scheme or path, a missing server, another
// CA (or one where the pin trusts the system roots), skip-verify, a TLS name
// or a proxy of the ClusterProfile's are refused, naming the check.
func TestCredentialServerPin(t *testing.T) {
	dir := t.TempDir()
	token := saTokenFor(t, []string{"wharf"}, credNow.Add(time.Hour))
	writeFile(t, dir, "wharf/token", token)
	ca, otherCA := testCA(t, "wharf-ca"), testCA(t, "evil-ca")
	withCA := pinsFile(t, render.ServerPin{Name: "wharf", Server: "https://api.wharf.example.com:6443", CAData: ca})
	defaultPort := pinsFile(t, render.ServerPin{Name: "wharf", Server: "https://api.wharf.example.com/"})
	rootsOnly := pinsFile(t, render.ServerPin{Name: "wharf", Server: "https://api.wharf.example.com:6443"})
	reflowed := []byte(strings.ReplaceAll(string(ca), "\n", "\r\n") + "\n")

	for _, tc := range []struct {
		name    string
		pins    string
		cluster clientauthv1.Cluster
		want    string // "" accepted; else the refusal's text
	}{
		{"exact", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443", CertificateAuthorityData: ca}, ""},
		{"trailing slash", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443/", CertificateAuthorityData: ca}, ""},
		{"host and scheme case", withCA, clientauthv1.Cluster{Server: "HTTPS://API.Wharf.Example.COM:6443", CertificateAuthorityData: ca}, ""},
		{"host:port with a CA is https, as client-go dials it", withCA, clientauthv1.Cluster{Server: "api.wharf.example.com:6443", CertificateAuthorityData: ca}, ""},
		{"the CA bundle re-encoded", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443", CertificateAuthorityData: reflowed}, ""},
		{"default port written out", defaultPort, clientauthv1.Cluster{Server: "https://api.wharf.example.com:443"}, ""},
		{"default port left out", defaultPort, clientauthv1.Cluster{Server: "https://api.wharf.example.com"}, ""},
		{"system roots", rootsOnly, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443"}, ""},

		{"another host", withCA, clientauthv1.Cluster{Server: "https://evil.example.com:6443", CertificateAuthorityData: ca},
			`server pin check failed: cluster wharf: spec.cluster.server "https://evil.example.com:6443" is not the pinned server "https://api.wharf.example.com:6443"`},
		{"another port", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6444", CertificateAuthorityData: ca}, "is not the pinned server"},
		{"a host under the pinned one", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com.evil:6443", CertificateAuthorityData: ca}, "is not the pinned server"},
		{"http", withCA, clientauthv1.Cluster{Server: "http://api.wharf.example.com:6443", CertificateAuthorityData: ca}, "is not the pinned server"},
		{"host:port without TLS is http", rootsOnly, clientauthv1.Cluster{Server: "api.wharf.example.com:6443"}, "is not the pinned server"},
		{"a path prefix", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443/proxy", CertificateAuthorityData: ca}, "is not the pinned server"},
		{"user info", withCA, clientauthv1.Cluster{Server: "https://evil@api.wharf.example.com:6443", CertificateAuthorityData: ca}, "is not the pinned server"},
		{"a query", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443?x=1", CertificateAuthorityData: ca}, "is not the pinned server"},
		{"no server", withCA, clientauthv1.Cluster{CertificateAuthorityData: ca}, "server pin check failed: cluster wharf: spec.cluster.server is missing"},
		{"another CA", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443", CertificateAuthorityData: otherCA},
			"spec.cluster.certificate-authority-data is not the pinned CA bundle"},
		{"the pinned CA and another", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443", CertificateAuthorityData: append(append([]byte{}, ca...), otherCA...)},
			"is not the pinned CA bundle"},
		{"no CA where one is pinned", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443"}, "is not the pinned CA bundle"},
		{"a CA where the roots are pinned", rootsOnly, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443", CertificateAuthorityData: otherCA},
			"certificate-authority-data is set, and the pin trusts the system roots only"},
		{"skip verify", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443", CertificateAuthorityData: ca, InsecureSkipTLSVerify: true},
			"insecure-skip-tls-verify is set"},
		{"tls server name", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443", CertificateAuthorityData: ca, TLSServerName: "evil.example.com"},
			`tls-server-name "evil.example.com" is set`},
		{"proxy", withCA, clientauthv1.Cluster{Server: "https://api.wharf.example.com:6443", CertificateAuthorityData: ca, ProxyURL: "http://evil:3128"},
			`proxy-url "http://evil:3128" is set`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := credential(execInfoFor(t, tc.cluster, `{"cluster":"wharf"}`), credentialFlags{tokenDir: dir, serverPins: tc.pins}, credNow)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := decodeCredential(t, out).Status.Token; got != token {
					t.Errorf("handed out %q", got)
				}
				return
			}
			if err == nil || out != nil {
				t.Fatalf("accepted: %s", out)
			}
			if !errors.Is(err, ErrServerPin) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want ErrServerPin containing %q", err, tc.want)
			}
		})
	}
}

// Without pins of its own the consumer hands nothing out for a cluster
// config: no --server-pins, an unreadable or invalid file, or a cluster
// the file does not pin. --token-file alone (a kubeconfig user, no config)
// needs none.
func TestCredentialPinsConfig(t *testing.T) {
	dir := t.TempDir()
	token := saTokenFor(t, []string{"wharf"}, credNow.Add(time.Hour))
	tokenFile := writeFile(t, dir, "wharf/token", token)
	info := clusterInfo(v1Info, `{"cluster":"wharf"}`)
	bad := func(content string) string { return writeFile(t, t.TempDir(), "pins.json", content) }
	for _, tc := range []struct {
		name, info, pins string
		want             error
		wantText         string
	}{
		{"no --server-pins", info, "", ErrNoPins, "no server pins: a cluster config needs --server-pins FILE"},
		{"missing file", info, filepath.Join(dir, "absent.json"), ErrNoPins, "--server-pins: open " + filepath.Join(dir, "absent.json")},
		{"not JSON", info, bad("clusters: []"), ErrNoPins, "no server pins: --server-pins "},
		{"unknown key", info, bad(`{"clusters":[{"name":"wharf","server":"https://a","ca":"x"}]}`), ErrNoPins, `unknown field "clusters[0].ca"`},
		{"duplicate name", info, bad(`{"clusters":[{"name":"wharf","server":"https://a"},{"name":"wharf","server":"https://evil"}]}`), ErrNoPins,
			`clusters[1].name: Duplicate value: "wharf"`},
		{"http pin", info, bad(`{"clusters":[{"name":"wharf","server":"http://a"}]}`), ErrNoPins, `clusters[0].server: Invalid value: "http://a": must be an https URL`},
		{"CA not PEM", info, bad(`{"clusters":[{"name":"wharf","server":"https://a","certificate-authority-data":"Q0E="}]}`), ErrNoPins,
			"clusters[0].certificate-authority-data"},
		{"cluster not pinned", clusterInfo(v1Info, `{"cluster":"dock"}`), pinsFile(t, render.ServerPin{Name: "wharf", Server: testServer}), ErrServerPin,
			"server pin check failed: cluster dock has no pin in --server-pins "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := credential(tc.info, credentialFlags{tokenDir: dir, serverPins: tc.pins}, credNow)
			if err == nil || out != nil {
				t.Fatalf("accepted: %s", out)
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q, want %v containing %q", err, tc.want, tc.wantText)
			}
		})
	}
	out, err := credential(`{"apiVersion":"client.authentication.k8s.io/v1","spec":{}}`, credentialFlags{tokenFile: tokenFile}, credNow)
	if err != nil || decodeCredential(t, out).Status.Token != token {
		t.Errorf("--token-file without a config or pins: %v", err)
	}
}

// A tokenFile named by the ClusterProfile must resolve, every symlink
// followed, inside CRUCIBLE_TOKEN_DIR: the kubelet's own symlinks inside it
// (..data) and a token dir that is itself a symlink are fine; a file
// outside, a symlink out of it (as a file or as a directory) and .. are not.
func TestCredentialTokenDir(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "tokens")
	token := saTokenFor(t, []string{"wharf"}, credNow.Add(time.Hour))
	writeFile(t, dir, "wharf/..2026_12_04/token", token)
	symlink(t, "..2026_12_04", filepath.Join(dir, "wharf", "..data"))
	symlink(t, "..data/token", filepath.Join(dir, "wharf", "token"))
	outside := writeFile(t, root, "elsewhere/token", token)
	symlink(t, outside, filepath.Join(dir, "wharf", "escape"))
	symlink(t, filepath.Join(root, "elsewhere"), filepath.Join(dir, "out"))
	symlink(t, dir, filepath.Join(root, "tokens-link"))
	writeFile(t, root, "tokensuffix/token", token) // a sibling sharing the dir's prefix
	pins := pinsFile(t, render.ServerPin{Name: "wharf", Server: testServer})

	for _, tc := range []struct {
		name, tokenFile, tokenDir string
		want                      string // "" accepted
	}{
		{"the kubelet's symlinks inside", filepath.Join(dir, "wharf", "token"), dir, ""},
		{"a token dir that is a symlink", filepath.Join(root, "tokens-link", "wharf", "token"), filepath.Join(root, "tokens-link"), ""},
		{"the real path, the dir a symlink", filepath.Join(dir, "wharf", "token"), filepath.Join(root, "tokens-link"), ""},
		{"outside", outside, dir, "token dir check failed: spec.cluster.config.tokenFile " + outside + " resolves to"},
		{"a symlink out", filepath.Join(dir, "wharf", "escape"), dir, "resolves to " + outside + ", outside CRUCIBLE_TOKEN_DIR="},
		{"a directory symlink out", filepath.Join(dir, "out", "token"), dir, "token dir check failed"},
		{"a sibling with the dir's name as prefix", filepath.Join(root, "tokensuffix", "token"), dir, "token dir check failed"},
		{"the hub token", "/var/run/secrets/kubernetes.io/serviceaccount/token", dir, "token dir check failed"},
		{"..", dir + "/wharf/../../elsewhere/token", dir, "must not contain .."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := clusterInfo(v1Info, fmt.Sprintf(`{"cluster":"wharf","tokenFile":%q}`, tc.tokenFile))
			out, err := credential(info, credentialFlags{tokenDir: tc.tokenDir, serverPins: pins}, credNow)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || out != nil {
				t.Fatalf("accepted: %s", out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), token) {
				t.Error("error contains the token")
			}
		})
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// FuzzCredentialServerPin: whatever spec.cluster.server a ClusterProfile
// holds, the plugin accepts it for a spoke pinned to
// https://api.wharf.example.com:6443 only if client-go would dial exactly
// that host and port over https, with no path, user or query.
func FuzzCredentialServerPin(f *testing.F) {
	for _, seed := range []string{
		"https://api.wharf.example.com:6443", "https://api.wharf.example.com:6443/", "HTTPS://API.WHARF.EXAMPLE.COM:6443",
		"api.wharf.example.com:6443", "https://api.wharf.example.com", "https://api.wharf.example.com:443", "http://api.wharf.example.com:6443",
		"https://api.wharf.example.com:6443@evil", "https://evil@api.wharf.example.com:6443", "https://api.wharf.example.com.evil:6443",
		"https://api.wharf.example.com:6443/../evil", "https://api.wharf.example.com:6443#x", "https://api.wharf.example.com:6443?x",
		"https://api.wharf.example.com%2eevil:6443", "https://[::1]:6443", "https://api.wharf.example.com:06443", "//api.wharf.example.com:6443",
		"https://api.wharf.example.com:6443\\@evil", "https://api.wharf.example.com:6443//", "", " https://api.wharf.example.com:6443",
	} {
		f.Add(seed)
	}
	pin := render.ServerPin{Name: "wharf", Server: "https://api.wharf.example.com:6443"}
	f.Fuzz(func(t *testing.T, server string) {
		err := serverpin.Check(pin, serverpin.Cluster{Server: server})
		if err != nil {
			if !errors.Is(err, ErrServerPin) {
				t.Fatalf("server %q: error %v is not the server pin check", server, err)
			}
			return
		}
		u, _, perr := restDefaultServerURL(server)
		if perr != nil || !strings.EqualFold(u.Scheme, "https") || !strings.EqualFold(u.Hostname(), "api.wharf.example.com") || u.Port() != "6443" ||
			strings.Trim(u.Path, "/") != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("server %q accepted for the pin, but client-go dials %v (%v)", server, u, perr)
		}
	})
}

// restDefaultServerURL is where client-go sends a request for server
// without a CA (so a bare host:port is http).
func restDefaultServerURL(server string) (*url.URL, string, error) {
	return rest.DefaultServerURL(server, "", schema.GroupVersion{}, false)
}
