package mirror

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// wantDiscovery is hubDiscovery as the mirror must serve it: every field as
// the hub sent it except jwks_uri.
func wantDiscovery(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(hubDiscovery), &doc); err != nil {
		t.Fatal(err)
	}
	doc["jwks_uri"] = json.RawMessage(strconv.Quote(mirrorJWKS))
	return doc
}

func TestServeDocuments(t *testing.T) {
	discoveryJSON, err := json.Marshal(wantDiscovery(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, target string
		wantType, wantBody   string // wantBody is unused for HEAD
	}{
		{"discovery GET", http.MethodGet, discoveryPath, "application/json", string(discoveryJSON)},
		{"discovery HEAD", http.MethodHead, discoveryPath, "application/json", string(discoveryJSON)},
		{"discovery with query", http.MethodGet, discoveryPath + "?x=1", "application/json", string(discoveryJSON)},
		{"jwks GET", http.MethodGet, jwksPath, "application/jwk-set+json", hubJWKS},
		{"jwks HEAD", http.MethodHead, jwksPath, "application/jwk-set+json", hubJWKS},
		{"jwks with query", http.MethodGet, jwksPath + "?../x", "application/jwk-set+json", hubJWKS},
		{"jwks with empty query", http.MethodGet, jwksPath + "?", "application/jwk-set+json", hubJWKS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hub := newFakeHub(t)
			// A trailing slash on the external URL must not double the one in jwks_uri.
			m := newTestMirror(t, hub, newFakeClock(), func(o *Options) { o.ExternalURL = externalURL + "/" })

			got := do(t, m, tt.method, tt.target)

			if got.status != http.StatusOK {
				t.Fatalf("status = %d, want 200; body %q", got.status, got.body)
			}
			wantHeader := map[string]string{
				"Content-Type":           tt.wantType,
				"Cache-Control":          "public, max-age=30", // DefaultTTL, nothing elapsed
				"X-Content-Type-Options": "nosniff",
			}
			gotHeader := map[string]string{}
			for k := range wantHeader {
				gotHeader[k] = got.header.Get(k)
			}
			if diff := cmp.Diff(wantHeader, gotHeader); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			if tt.method == http.MethodHead {
				if got.body != "" {
					t.Errorf("HEAD body = %q, want none", got.body)
				}
				get := do(t, m, http.MethodGet, tt.target)
				if got, want := got.header.Get("Content-Length"), strconv.Itoa(len(get.body)); got != want {
					t.Errorf("HEAD Content-Length = %s, want %s (the GET body's)", got, want)
				}
				return
			}
			if got, want := got.header.Get("Content-Length"), strconv.Itoa(len(got.body)); got != want {
				t.Errorf("Content-Length = %s, want %s", got, want)
			}
			assertJSONEqual(t, tt.wantBody, got.body)
		})
	}
}

// assertJSONEqual compares two JSON objects field by field, raw values
// byte for byte.
func assertJSONEqual(t *testing.T, want, got string) {
	t.Helper()
	var w, g map[string]json.RawMessage
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is not a JSON object: %v", err)
	}
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", got, err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}

func TestIssuerPassesThroughByteForByte(t *testing.T) {
	issuers := []string{
		`"https://kubernetes.default.svc"`,
		`"https:\/\/kubernetes.default.svc"`,
		`"https://hub.example.com/a&b<c>"`,
		`"https://h\u00fcb.example.com"`,
		`"https://hüb.example.com"`,
	}
	for _, issuer := range issuers {
		t.Run(issuer, func(t *testing.T) {
			hub := newFakeHub(t)
			hub.set(discoveryPath, answer{status: http.StatusOK,
				body: `{"jwks_uri":"https://10.0.0.1:6443/openid/v1/jwks", "issuer" : ` + issuer + `}`})
			m := newTestMirror(t, hub, newFakeClock(), nil)

			got := do(t, m, http.MethodGet, discoveryPath)

			var doc map[string]json.RawMessage
			if err := json.Unmarshal([]byte(got.body), &doc); err != nil {
				t.Fatalf("status %d, body %q: %v", got.status, got.body, err)
			}
			if diff := cmp.Diff(issuer, string(doc["issuer"])); diff != "" {
				t.Errorf("issuer bytes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(strconv.Quote(mirrorJWKS), string(doc["jwks_uri"])); diff != "" {
				t.Errorf("jwks_uri (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMethodNotAllowed(t *testing.T) {
	hub := newFakeHub(t)
	m := newTestMirror(t, hub, newFakeClock(), nil)
	for _, path := range []string{discoveryPath, jwksPath} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
			t.Run(method+" "+path, func(t *testing.T) {
				got := do(t, m, method, path)
				want := reply{
					status: http.StatusMethodNotAllowed,
					header: http.Header{"Allow": {"GET, HEAD"}},
					body:   `{"error":"method not allowed"}` + "\n",
				}
				got.header = http.Header{"Allow": got.header.Values("Allow")}
				if diff := cmp.Diff(want, got, cmp.AllowUnexported(reply{})); diff != "" {
					t.Errorf("reply (-want +got):\n%s", diff)
				}
			})
		}
	}
	if n := hub.count(discoveryPath) + hub.count(jwksPath); n != 0 {
		t.Errorf("hub got %d requests for refused methods, want 0", n)
	}
}

func TestNotFound(t *testing.T) {
	hub := newFakeHub(t)
	m := newTestMirror(t, hub, newFakeClock(), nil)
	targets := []string{
		"/",
		"/metrics",
		"/openid/v1/jwks/",
		"/.well-known/openid-configuration/",
		"/openid/v1/jwks/../x",
		"/x/../openid/v1/jwks",
		"/.well-known/openid-configuration/../openid-configuration",
		"//.well-known/openid-configuration",
		"//openid/v1/jwks",
		"/openid/v1//jwks",
		"/./openid/v1/jwks",
		"/openid%2Fv1%2Fjwks",
		"/openid/v1/%6Awks",
		"/OPENID/V1/JWKS",
		"/.well-known/openid-configuration.json",
		"/api/pods/p/artifacts/log",
	}
	for _, target := range targets {
		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
			t.Run(method+" "+target, func(t *testing.T) {
				got := do(t, m, method, target)
				if got.status != http.StatusNotFound {
					t.Errorf("status = %d, want 404", got.status)
				}
				wantBody := `{"error":"not found"}` + "\n"
				if method == http.MethodHead {
					wantBody = ""
				}
				if got.body != wantBody {
					t.Errorf("body = %q, want %q", got.body, wantBody)
				}
				if got.header.Get("Allow") != "" {
					t.Errorf("Allow = %q on a 404", got.header.Get("Allow"))
				}
			})
		}
	}
	if n := hub.count(discoveryPath) + hub.count(jwksPath); n != 0 {
		t.Errorf("hub got %d requests for unknown paths, want 0", n)
	}
}
