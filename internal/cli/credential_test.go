package cli

import (
	"bytes"
	"crypto/elliptic"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/jwt/jwttest"
	"crucible.dev/crucible/internal/render"
)

var credNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const (
	v1Info      = "client.authentication.k8s.io/v1"
	v1beta1Info = "client.authentication.k8s.io/v1beta1"
)

// saToken signs a token shaped like a projected service-account token for
// the spoke wharf.
func saToken(t *testing.T, exp time.Time) string {
	t.Helper()
	return saTokenFor(t, []string{"wharf"}, exp)
}

// saTokenFor signs a projected service-account token for the audiences aud
// (no aud claim when nil).
func saTokenFor(t *testing.T, aud []string, exp time.Time) string {
	t.Helper()
	claims := map[string]any{
		"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:crucible:crucible-controller",
		"iat": exp.Add(-time.Hour).Unix(), "nbf": exp.Add(-time.Hour).Unix(),
	}
	if aud != nil {
		claims["aud"] = aud
	}
	if !exp.IsZero() {
		claims["exp"] = exp.Unix()
	}
	return jwttest.Sign(t, jwttest.ECKey(elliptic.P256()), jose.ES256, "k1", claims, nil)
}

// clusterInfo is the KUBERNETES_EXEC_INFO client-go sends with
// provideClusterInfo: true and the cluster's exec extension config (a JSON
// value; "" for a cluster without the extension).
func clusterInfo(apiVersion, config string) string {
	cfg := ""
	if config != "" {
		cfg = `,"config":` + config
	}
	return fmt.Sprintf(`{"apiVersion":%q,"kind":"ExecCredential","spec":{"interactive":false,"cluster":{"server":"https://api.wharf.example.com:6443"%s}}}`,
		apiVersion, cfg)
}

// writeFile writes content at dir/rel, making its directories.
func writeFile(t *testing.T, dir, rel, content string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testServer is the server clusterInfo sends for every cluster.
const testServer = "https://api.wharf.example.com:6443"

// writePins writes a --server-pins file pinning each name to testServer
// with no CA, and the audiences of auds (name=audience) where given.
func writePins(t *testing.T, dir string, names []string, auds map[string]string) string {
	t.Helper()
	var pins render.ServerPins
	for _, n := range names {
		pins.Clusters = append(pins.Clusters, render.ServerPin{Name: n, Server: testServer, Audience: auds[n]})
	}
	data, err := json.Marshal(pins)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, "pins/server-pins.json", string(data))
}

// decodedCredential is the part of an ExecCredential client-go reads.
type decodedCredential struct {
	APIVersion, Kind string
	Status           struct {
		Token               string
		ExpirationTimestamp string
	}
}

func decodeCredential(t *testing.T, out []byte) decodedCredential {
	t.Helper()
	var got decodedCredential
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	return got
}

// wantCredential is the credential of token, which expires at exp, answered
// at credNow: client-go is to ask again within a minute (the kubelet may have
// rotated the file by then), or at exp if that is sooner.
func wantCredential(apiVersion, token string, exp time.Time) decodedCredential {
	var want decodedCredential
	want.APIVersion, want.Kind = apiVersion, "ExecCredential"
	next := credNow.Add(time.Minute)
	if exp.Before(next) {
		next = exp
	}
	want.Status.Token, want.Status.ExpirationTimestamp = token, next.UTC().Format(time.RFC3339)
	return want
}

// A token is asked for again a minute later, as client-go re-reads a
// tokenFile, so a rotation by the kubelet is seen then, not at exp; a token
// with less than a minute left is asked for again at its exp.
func TestCredentialExpiry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		exp      time.Time
		wantNext time.Time
	}{
		{"an hour left", credNow.Add(time.Hour), credNow.Add(time.Minute)},
		{"a minute and a second left", credNow.Add(61 * time.Second), credNow.Add(time.Minute)},
		{"30 seconds left", credNow.Add(30 * time.Second), credNow.Add(30 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := credentialExpiry(credNow, tc.exp); !got.Equal(tc.wantNext) {
				t.Errorf("credentialExpiry(now, now+%s) = now+%s, want now+%s", tc.exp.Sub(credNow), got.Sub(credNow), tc.wantNext.Sub(credNow))
			}
		})
	}
}

// The plugin answers in the version client-go asks for, with the token and
// its exp; without KUBERNETES_EXEC_INFO (run by hand) it answers v1.
func TestExecCredentialVersions(t *testing.T) {
	exp := credNow.Add(10 * time.Minute)
	token := saToken(t, exp)
	for _, tc := range []struct{ name, info, want string }{
		{"no exec info", "", v1Info},
		{"v1", `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`, v1Info},
		{"v1beta1", `{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","spec":{}}`, v1beta1Info},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := parseExecInfo(tc.info)
			if err != nil {
				t.Fatal(err)
			}
			out, err := execCredential(req.apiVersion, token, tokenSource{file: "/f"}, credNow)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantCredential(tc.want, token, exp), decodeCredential(t, out)); diff != "" {
				t.Errorf("ExecCredential (-want +got):\n%s", diff)
			}
		})
	}
}

// Every refusal of a token names the file and never contains the token.
func TestExecCredentialRefusals(t *testing.T) {
	const file = "/var/run/secrets/crucible/wharf/token"
	expired := saToken(t, credNow.Add(-90*time.Second))
	for _, tc := range []struct {
		name, token string
		audience    string // the cluster's, when a config names one
		want        error
		wantText    string
	}{
		{name: "expired", token: expired, want: ErrTokenExpired, wantText: "token expired at 2026-11-30T11:58:30Z (1m30s ago)"},
		{name: "expires now", token: saToken(t, credNow), want: ErrTokenExpired},
		{name: "no exp", token: saToken(t, time.Time{}), want: ErrTokenMalformed, wantText: "no exp claim"},
		{name: "not a JWT", token: "hello", want: ErrTokenMalformed},
		{name: "JSON serialization", token: `{"payload":"x"}`, want: jwt.ErrMalformed},
		{name: "alg none", token: jwttest.Raw(map[string]any{"alg": "none"}, map[string]any{"exp": credNow.Add(time.Hour).Unix()}, ""), want: ErrTokenMalformed},
		{name: "exp not a number", token: jwttest.Raw(map[string]any{"alg": "RS256"}, map[string]any{"exp": "tomorrow"}, "c2ln"), want: ErrTokenMalformed},
		{name: "oversized", token: strings.Repeat("a.", jwt.MaxTokenBytes), want: ErrTokenMalformed},
		{name: "another cluster's audience", token: saToken(t, credNow.Add(time.Hour)), audience: "dock", want: ErrTokenAudience,
			wantText: `token for another audience: its aud ["wharf"] is not exactly "dock", the audience of cluster dock`},
		{name: "an audience besides the cluster's", token: saTokenFor(t, []string{"wharf", "https://kubernetes.default.svc"}, credNow.Add(time.Hour)), audience: "wharf", want: ErrTokenAudience,
			wantText: `its aud ["wharf" "https://kubernetes.default.svc"] is not exactly "wharf"`},
		{name: "an empty audience besides", token: saTokenFor(t, []string{"wharf", ""}, credNow.Add(time.Hour)), audience: "wharf", want: ErrTokenAudience},
		{name: "empty aud list", token: saTokenFor(t, []string{}, credNow.Add(time.Hour)), audience: "wharf", want: ErrTokenAudience},
		{name: "no aud", token: saTokenFor(t, nil, credNow.Add(time.Hour)), audience: "wharf", want: ErrTokenAudience},
		{name: "audience before expiry", token: saTokenFor(t, []string{"dock"}, credNow.Add(-time.Hour)), audience: "wharf", want: ErrTokenAudience},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tokenSource{file: file, cluster: tc.audience, audience: tc.audience}
			out, err := execCredential(v1Info, tc.token, src, credNow)
			if err == nil {
				t.Fatalf("accepted: %s", out)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "token file "+file+": ") {
				t.Errorf("error %q does not name the file", err)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q, want it to contain %q", err, tc.wantText)
			}
			if len(tc.token) > 20 && strings.Contains(err.Error(), tc.token) {
				t.Errorf("error contains the token")
			}
		})
	}
}

// Exec info that client-go would never send is refused before any file is
// read.
func TestCredentialExecInfoRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		want       error
		wantText   string
	}{
		{name: "unknown version", info: `{"apiVersion":"client.authentication.k8s.io/v2"}`, want: ErrExecInfoVersion,
			wantText: `KUBERNETES_EXEC_INFO: unsupported ExecCredential apiVersion "client.authentication.k8s.io/v2"`},
		{name: "no version", info: `{"kind":"ExecCredential"}`, want: ErrExecInfoVersion},
		{name: "hostile exec info", info: `{"apiVersion":`, wantText: "KUBERNETES_EXEC_INFO: "},
		{name: "spec.cluster not an object", info: `{"apiVersion":"client.authentication.k8s.io/v1","spec":{"cluster":"wharf"}}`, wantText: "KUBERNETES_EXEC_INFO: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := parseExecInfo(tc.info)
			if err == nil {
				t.Fatalf("accepted: %+v", req)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), tc.wantText) {
				t.Errorf("error %q, want it to start with %q", err, tc.wantText)
			}
		})
	}
}

// As a ClusterProfile access provider, the plugin hands out the token of
// the cluster the exec extension names, and only if the token is for that
// cluster's audience; every refusal prints nothing, names the bad input and
// never contains a token.
func TestCredentialClusterConfig(t *testing.T) {
	dir := t.TempDir()
	exp := credNow.Add(time.Hour)
	wharf, dock := saTokenFor(t, []string{"wharf"}, exp), saTokenFor(t, []string{"dock"}, exp)
	custom := saTokenFor(t, []string{"https://quay.example.com"}, exp)
	writeFile(t, dir, "wharf/token", wharf+"\n")
	writeFile(t, dir, "dock/token", wharf) // mislabelled: dock's directory holds wharf's token
	dockFile := writeFile(t, dir, "elsewhere/dock.jwt", dock)
	customFile := writeFile(t, dir, "custom/token", custom)
	writeFile(t, dir, "quay/token", wharf) // quay's pinned audience is not wharf
	pins := writePins(t, t.TempDir(), []string{"wharf", "dock", "stale", "harbor", "quay"}, map[string]string{"quay": "https://quay.example.com"})
	writeFile(t, dir, "stale/token", saTokenFor(t, []string{"stale"}, credNow.Add(-time.Minute)))

	for _, tc := range []struct {
		name     string
		info     string // KUBERNETES_EXEC_INFO
		flag     string // --token-file
		tokenDir string // CRUCIBLE_TOKEN_DIR; the test's dir when empty, "-" for unset
		want     string // the token handed out; empty: refused
		wantErr  error
		wantText []string
	}{
		{name: "v1, default token dir", info: clusterInfo(v1Info, `{"cluster":"wharf"}`), want: wharf},
		{name: "v1beta1", info: clusterInfo(v1beta1Info, `{"cluster":"wharf"}`), want: wharf},
		{name: "explicit tokenFile", info: clusterInfo(v1Info, fmt.Sprintf(`{"cluster":"dock","tokenFile":%q}`, dockFile)), want: dock},
		{name: "pinned audience, named", info: clusterInfo(v1Info, fmt.Sprintf(`{"cluster":"quay","tokenFile":%q,"audience":"https://quay.example.com"}`, customFile)), want: custom},
		{name: "pinned audience, not named", info: clusterInfo(v1Info, fmt.Sprintf(`{"cluster":"quay","tokenFile":%q}`, customFile)), want: custom},
		{name: "null optional keys", info: clusterInfo(v1Info, `{"cluster":"wharf","tokenFile":null,"audience":null}`), want: wharf},
		{name: "--token-file and a config that agree", info: clusterInfo(v1Info, `{"cluster":"dock"}`), flag: dockFile, want: dock},
		{name: "--token-file wins over tokenFile", info: clusterInfo(v1Info, fmt.Sprintf(`{"cluster":"dock","tokenFile":%q}`, filepath.Join(dir, "absent"))), flag: dockFile, want: dock},
		{name: "--token-file, no config: no audience to check", info: `{"apiVersion":"client.authentication.k8s.io/v1","spec":{}}`, flag: dockFile, want: dock},

		{name: "config naming dock, wharf's token in dock's directory", info: clusterInfo(v1Info, `{"cluster":"dock"}`), wantErr: ErrTokenAudience,
			wantText: []string{"token file " + filepath.Join(dir, "dock/token") + ": ", `its aud ["wharf"] is not exactly "dock", the audience of cluster dock`}},
		{name: "config naming dock, tokenFile for wharf", info: clusterInfo(v1Info, fmt.Sprintf(`{"cluster":"dock","tokenFile":%q}`, filepath.Join(dir, "wharf/token"))), wantErr: ErrTokenAudience,
			wantText: []string{`["wharf"]`, `"dock"`}},
		{name: "config naming dock, --token-file for wharf", info: clusterInfo(v1Info, `{"cluster":"dock"}`), flag: filepath.Join(dir, "wharf/token"), wantErr: ErrTokenAudience},
		{name: "pinned audience not in the token", info: clusterInfo(v1Info, `{"cluster":"quay"}`), wantErr: ErrTokenAudience,
			wantText: []string{`is not exactly "https://quay.example.com", the audience of cluster quay`}},
		{name: "audience the pin does not allow", info: clusterInfo(v1Info, `{"cluster":"wharf","audience":"https://wharf.example.com"}`), wantErr: ErrAudiencePin,
			wantText: []string{`audience pin check failed: cluster wharf: spec.cluster.config.audience "https://wharf.example.com" is not the pinned audience "wharf"`}},
		{name: "expired", info: clusterInfo(v1Info, `{"cluster":"stale"}`), wantErr: ErrTokenExpired, wantText: []string{filepath.Join(dir, "stale/token")}},
		{name: "missing token file", info: clusterInfo(v1Info, `{"cluster":"harbor"}`), wantErr: fs.ErrNotExist, wantText: []string{"token file " + filepath.Join(dir, "harbor/token") + ": "}},
		{name: "default token dir", info: clusterInfo(v1Info, `{"cluster":"harbor"}`), tokenDir: "-", wantErr: fs.ErrNotExist,
			wantText: []string{"token file /var/run/secrets/crucible/harbor/token: "}},
		{name: "relative CRUCIBLE_TOKEN_DIR", info: clusterInfo(v1Info, `{"cluster":"wharf"}`), tokenDir: "secrets",
			wantText: []string{`CRUCIBLE_TOKEN_DIR "secrets": must be an absolute path`}},

		{name: "no --token-file, no exec info", wantErr: ErrNoClusterConfig,
			wantText: []string{"no --token-file and no KUBERNETES_EXEC_INFO", "provideClusterInfo: true"}},
		{name: "exec info without spec.cluster", info: `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`,
			wantErr: ErrNoClusterConfig, wantText: []string{"KUBERNETES_EXEC_INFO has no spec.cluster: set provideClusterInfo: true in the exec config, or give --token-file"}},
		{name: "spec.cluster without config", info: clusterInfo(v1Info, ""), wantErr: ErrNoClusterConfig,
			wantText: []string{"KUBERNETES_EXEC_INFO has no spec.cluster.config: ", "client.authentication.k8s.io/exec", "--token-file"}},
		{name: "null config", info: clusterInfo(v1beta1Info, "null"), wantErr: ErrNoClusterConfig},
		{name: "config a string", info: clusterInfo(v1Info, `"wharf"`), wantErr: ErrClusterConfig, wantText: []string{`want a JSON object such as {"cluster": "wharf"}`}},
		{name: "config an array", info: clusterInfo(v1Info, `["wharf"]`), wantErr: ErrClusterConfig},
		{name: "unknown key", info: clusterInfo(v1Info, `{"cluster":"wharf","namespace":"x"}`), wantErr: ErrClusterConfig,
			wantText: []string{`spec.cluster.config: unknown field "namespace"`}},
		{name: "key in another case", info: clusterInfo(v1Info, `{"Cluster":"wharf"}`), wantErr: ErrClusterConfig,
			wantText: []string{`unknown field "Cluster"`, "spec.cluster.config.cluster: Required value"}},
		{name: "repeated cluster", info: clusterInfo(v1Info, `{"cluster":"dock","cluster":"wharf"}`), wantErr: ErrClusterConfig,
			wantText: []string{`duplicate field "cluster"`}},
		{name: "oversized", info: clusterInfo(v1Info, fmt.Sprintf(`{"cluster":"wharf","audience":%q}`, strings.Repeat("a", maxClusterConfigBytes))), wantErr: ErrClusterConfig,
			wantText: []string{"KUBERNETES_EXEC_INFO spec.cluster.config: invalid cluster config: larger than 65536 bytes"}},
		{name: "no cluster", info: clusterInfo(v1Info, `{}`), wantErr: ErrClusterConfig, wantText: []string{"spec.cluster.config.cluster: Required value"}},
		{name: "cluster not a DNS label", info: clusterInfo(v1Info, `{"cluster":"Wharf"}`), wantErr: ErrClusterConfig,
			wantText: []string{`spec.cluster.config.cluster: Invalid value: "Wharf": must be a DNS label`}},
		{name: "cluster a path", info: clusterInfo(v1Info, `{"cluster":"../wharf"}`), wantErr: ErrClusterConfig},
		{name: "cluster a subdomain", info: clusterInfo(v1Info, `{"cluster":"wharf.example"}`), wantErr: ErrClusterConfig},
		{name: "cluster too long", info: clusterInfo(v1Info, fmt.Sprintf(`{"cluster":%q}`, strings.Repeat("w", 64))), wantErr: ErrClusterConfig},
		{name: "cluster not a string", info: clusterInfo(v1Info, `{"cluster":7}`), wantErr: ErrClusterConfig},
		{name: "relative tokenFile", info: clusterInfo(v1Info, `{"cluster":"wharf","tokenFile":"wharf/token"}`), wantErr: ErrClusterConfig,
			wantText: []string{`spec.cluster.config.tokenFile: Invalid value: "wharf/token": must be an absolute path`}},
		{name: "empty tokenFile", info: clusterInfo(v1Info, `{"cluster":"wharf","tokenFile":""}`), wantErr: ErrClusterConfig},
		{name: "tokenFile climbing", info: clusterInfo(v1Info, `{"cluster":"wharf","tokenFile":"/var/run/secrets/crucible/../../../etc/shadow"}`), wantErr: ErrClusterConfig,
			wantText: []string{"must not contain .."}},
		{name: "empty audience", info: clusterInfo(v1Info, `{"cluster":"wharf","audience":""}`), wantErr: ErrClusterConfig,
			wantText: []string{"spec.cluster.config.audience: Invalid value: \"\": must not be empty"}},
		{name: "every problem at once", info: clusterInfo(v1Info, `{"cluster":"Dock","tokenFile":"rel","extra":1}`), wantErr: ErrClusterConfig,
			wantText: []string{`unknown field "extra"`, `cluster: Invalid value: "Dock"`, `tokenFile: Invalid value: "rel"`}},
		{name: "a bad config is refused beside --token-file", info: clusterInfo(v1Info, `{"cluster":"wharf","tokenfile":"/x"}`), flag: dockFile, wantErr: ErrClusterConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokenDir := tc.tokenDir
			switch tokenDir {
			case "":
				tokenDir = dir
			case "-":
				tokenDir = ""
			}
			out, err := credential(tc.info, credentialFlags{tokenFile: tc.flag, tokenDir: tokenDir, serverPins: pins}, credNow)
			if tc.want != "" {
				if err != nil {
					t.Fatal(err)
				}
				wantVersion := v1Info
				if strings.Contains(tc.info, v1beta1Info) {
					wantVersion = v1beta1Info
				}
				if diff := cmp.Diff(wantCredential(wantVersion, tc.want, exp), decodeCredential(t, out)); diff != "" {
					t.Errorf("ExecCredential (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %s", out)
			}
			if out != nil {
				t.Errorf("printed %s", out)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			for _, s := range tc.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q, want it to contain %q", err, s)
				}
			}
			for _, token := range []string{wharf, dock, custom} {
				if strings.Contains(err.Error(), token) {
					t.Errorf("error contains a token")
				}
			}
		})
	}
}

// FuzzCredentialClusterConfig: parseClusterConfig accepts exactly the JSON
// objects whose keys are cluster, tokenFile and audience, each at most once
// and spelled exactly, and then only a config that names a valid cluster
// and a usable file; an accepted config survives a round trip unchanged.
func FuzzCredentialClusterConfig(f *testing.F) {
	for _, seed := range []string{
		`{"cluster":"wharf"}`, `{"cluster":"wharf","tokenFile":"/t","audience":"https://a"}`,
		`{"cluster":"wharf","tokenFile":null}`, `{"cluster":"dock","cluster":"wharf"}`, `{"Cluster":"wharf"}`,
		`{"cluster":"wh\u0061rf"}`, `{"cl\u0075ster":"wharf"}`, `{"cluster":"wharf","x":{}}`, `{"cluster":"Wharf"}`,
		`{"cluster":"wharf","tokenFile":"/a/../b"}`, `{"cluster":"wharf","tokenFile":"a"}`, `{"cluster":"wharf","audience":""}`,
		`{"cluster":"wharf"} {}`, `{"cluster":"wharf",}`, `null`, `"wharf"`, `[]`, `{}`, ``, `{"cluster":"\u212aelvin"}`,
		"{\"cluster\":\"wharf\",\"audience\":\"\xff\"}", `{"cluster":"wharf","tokenFile":"/a/..."}`,
		// Issue 37's hostile ClusterProfiles: the consumer's hub token and
		// audience, a climb out of the token dir, a server smuggled in.
		`{"cluster":"wharf","tokenFile":"/var/run/secrets/kubernetes.io/serviceaccount/token","audience":"https://kubernetes.default.svc"}`,
		`{"cluster":"wharf","tokenFile":"/var/run/secrets/crucible/wharf/../../kubernetes.io/serviceaccount/token"}`,
		`{"cluster":"wharf","tokenFile":"/var/run/secrets/crucible/wharf/..data/token"}`,
		`{"cluster":"wharf","server":"https://evil.example.com"}`, `{"cluster":"wharf","audience":"wharf","audience":"https://kubernetes.default.svc"}`,
		`{"cluster":"wharf","tokenFile":"/var/run/secrets/crucible/wharf/token\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseClusterConfig(data)
		wantOK := plainlyValidConfig(data)
		if err != nil {
			if !errors.Is(err, ErrClusterConfig) || !strings.HasPrefix(err.Error(), "KUBERNETES_EXEC_INFO") {
				t.Fatalf("parseClusterConfig(%q): error %q does not say it is the cluster config", data, err)
			}
			if wantOK {
				t.Fatalf("parseClusterConfig(%q) refused a valid config: %v", data, err)
			}
			return
		}
		if !wantOK {
			t.Fatalf("parseClusterConfig(%q) = %+v, want a refusal", data, c)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := parseClusterConfig(again)
		if err != nil || !cmp.Equal(c, back) {
			t.Fatalf("%q → %+v → %s → %+v, %v", data, c, again, back, err)
		}
	})
}

// plainlyValidConfig is the config rule written the slow way: a token
// stream of one JSON object, its members checked one by one.
func plainlyValidConfig(data []byte) bool {
	if len(data) > maxClusterConfigBytes || !json.Valid(data) {
		return false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(data, &members) != nil || members == nil {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	values := map[string]*string{}
	for dec.More() {
		tok, _ := dec.Token()
		name, _ := tok.(string)
		var v *string
		if seen[name] || (name != "cluster" && name != "tokenFile" && name != "audience") || dec.Decode(&v) != nil {
			return false
		}
		seen[name], values[name] = true, v
	}
	if v := values["cluster"]; v == nil || !isDNSLabel(*v) {
		return false
	}
	if v := values["tokenFile"]; v != nil {
		if !strings.HasPrefix(*v, "/") || *v == "/.." || strings.HasPrefix(*v, "/../") || strings.Contains(*v, "/../") || strings.HasSuffix(*v, "/..") {
			return false
		}
	}
	if v := values["audience"]; v != nil && *v == "" {
		return false
	}
	return true
}

// isDNSLabel is RFC 1123's label, by hand.
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// The command reads the file (trailing newline trimmed) and refuses a
// missing, empty, oversized or expired one, naming it.
func TestCredentialCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string { return writeFile(t, dir, name, content) }
	valid := saToken(t, time.Now().Add(time.Hour))
	t.Setenv(execInfoEnv, `{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential"}`)

	var out, errOut bytes.Buffer
	if err := Run(t.Context(), []string{"credential", "--token-file", write("good", valid+"\n")}, &out, &errOut); err != nil {
		t.Fatalf("valid token: %v", err)
	}
	if !strings.Contains(out.String(), `"apiVersion":"client.authentication.k8s.io/v1beta1"`) || !strings.Contains(out.String(), `"token":"`+valid+`"`) {
		t.Errorf("output %s", out.String())
	}

	for _, tc := range []struct {
		name, file string
		want       error
	}{
		{"missing", filepath.Join(dir, "absent"), fs.ErrNotExist},
		{"empty", write("empty", " \n"), ErrTokenMalformed},
		{"oversized", write("big", strings.Repeat("x", jwt.MaxTokenBytes+1)), ErrTokenMalformed},
		{"expired", write("old", saToken(t, time.Now().Add(-time.Hour))), ErrTokenExpired},
		{"a directory", dir, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out.Reset()
			err := Run(t.Context(), []string{"credential", "--token-file", tc.file}, &out, &errOut)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "token file "+tc.file+": ") {
				t.Errorf("error %q does not start with the file", err)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
	out.Reset()
	if err := Run(t.Context(), []string{"credential"}, &out, &errOut); !errors.Is(err, ErrNoClusterConfig) || !strings.Contains(err.Error(), "--token-file") || out.Len() != 0 {
		t.Errorf("without --token-file or a cluster config: %v, printed %q", err, out.String())
	}
}

// The command finds a ClusterProfile cluster's token under CRUCIBLE_TOKEN_DIR.
func TestCredentialCommandTokenDir(t *testing.T) {
	dir := t.TempDir()
	token := saTokenFor(t, []string{"wharf"}, time.Now().Add(time.Hour))
	writeFile(t, dir, "wharf/token", token+"\n")
	t.Setenv(tokenDirEnv, dir)
	t.Setenv(execInfoEnv, clusterInfo(v1Info, `{"cluster":"wharf"}`))
	pins := writePins(t, t.TempDir(), []string{"wharf", "dock"}, nil)
	var out bytes.Buffer
	if err := Run(t.Context(), []string{"credential", "--server-pins", pins}, &out, &out); err != nil {
		t.Fatal(err)
	}
	if got := decodeCredential(t, out.Bytes()); got.APIVersion != v1Info || got.Status.Token != token {
		t.Errorf("ExecCredential %s", out.String())
	}

	t.Setenv(execInfoEnv, clusterInfo(v1Info, `{"cluster":"dock"}`))
	out.Reset()
	if err := Run(t.Context(), []string{"credential", "--server-pins", pins}, &out, &out); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, "dock", "token")) {
		t.Errorf("dock without a token: %v", err)
	}

	out.Reset()
	if err := Run(t.Context(), []string{"credential"}, &out, &out); !errors.Is(err, ErrNoPins) || out.Len() != 0 {
		t.Errorf("without --server-pins: %v, printed %q", err, out.String())
	}
}

// client-go itself, as the ClusterProfile credentials library configures it
// (an ExecProvider with provideClusterInfo and the cluster's extension as
// its Config), runs the crucible binary and sends the named cluster's token;
// for a config naming a cluster whose token is not there, no request
// carries a token at all and the refusal is on client-go's stderr.
func TestCredentialThroughClientGo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the crucible binary; run without -short")
	}
	bin := devstacktest.CrucibleBinary(t)
	dir := t.TempDir()
	token := saTokenFor(t, []string{"wharf"}, time.Now().Add(time.Hour))
	writeFile(t, dir, "wharf/token", token)
	writeFile(t, dir, "dock/token", token) // wharf's token where dock's belongs

	var mu sync.Mutex
	var auths []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.2"}`))
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	pinsFor := func(server string) string {
		data, err := json.Marshal(render.ServerPins{Clusters: []render.ServerPin{
			{Name: "wharf", Server: server, CAData: ca}, {Name: "dock", Server: server, CAData: ca}}})
		if err != nil {
			t.Fatal(err)
		}
		return writeFile(t, t.TempDir(), "pins.json", string(data))
	}
	pinned, elsewhere := pinsFor(srv.URL+"/"), pinsFor("https://api.wharf.example.com")

	for _, tc := range []struct {
		name, apiVersion, config string
		pins                     string
		want                     []string // Authorization headers the server saw
		wantStderr               string   // the plugin's, which client-go passes through
	}{
		{"v1", v1Info, `{"cluster":"wharf"}`, pinned, []string{"Bearer " + token}, ""},
		{"v1beta1", v1beta1Info, `{"cluster":"wharf"}`, pinned, []string{"Bearer " + token}, ""},
		{"wrong audience", v1Info, `{"cluster":"dock"}`, pinned, nil, "crucible: token file " + filepath.Join(dir, "dock", "token") +
			`: token for another audience: its aud ["wharf"] is not exactly "dock", the audience of cluster dock` + "\n"},
		{"server not the pinned one", v1Info, `{"cluster":"wharf"}`, elsewhere, nil, "crucible: server pin check failed: cluster wharf: spec.cluster.server " +
			fmt.Sprintf("%q", srv.URL) + ` is not the pinned server "https://api.wharf.example.com"` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			auths = nil
			mu.Unlock()
			cfg := &rest.Config{
				Host:            srv.URL,
				TLSClientConfig: rest.TLSClientConfig{CAData: ca},
				ExecProvider: &clientcmdapi.ExecConfig{
					APIVersion:         tc.apiVersion,
					Command:            bin,
					Args:               []string{"credential", "--server-pins", tc.pins},
					Env:                []clientcmdapi.ExecEnvVar{{Name: tokenDirEnv, Value: dir}},
					ProvideClusterInfo: true,
					InteractiveMode:    clientcmdapi.NeverExecInteractiveMode,
					Config:             &runtime.Unknown{Raw: []byte(tc.config), ContentType: runtime.ContentTypeJSON},
				},
			}
			stderr := captureStderr(t) // before the client: client-go's authenticator keeps os.Stderr
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = client.Discovery().ServerVersion()
			if got := stderr(); got != tc.wantStderr {
				t.Errorf("plugin stderr %q, want %q", got, tc.wantStderr)
			}
			if (err == nil) != (tc.want != nil) {
				t.Fatalf("server version: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(tc.want, auths); diff != "" {
				t.Errorf("Authorization headers (-want +got):\n%s", diff)
			}
		})
	}
}

// captureStderr points os.Stderr at a file until the test ends; the
// returned func reads what was written so far.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = f
	t.Cleanup(func() {
		os.Stderr = saved
		_ = f.Close()
	})
	return func() string {
		data, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
}
