package devstack

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The kubelet-port handler refuses what the API server would never send and
// what an unauthenticated local user might.
func TestContainerLogsEdge(t *testing.T) {
	r := &nodeRuntime{spoke: "s", nodes: []string{"n"}, pods: map[types.UID]*podRun{}}
	started := newPodRun(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", Namespace: "ns", Name: "running"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "work"}}}})
	l, err := newCRILog(filepath.Join(t.TempDir(), "work.log"))
	if err != nil {
		t.Fatal(err)
	}
	l.expect(1)
	l.copy("stdout", strings.NewReader("hi\n"))
	started.log = l
	waiting := newPodRun(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u2", Namespace: "ns", Name: "waiting"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "work"}}}})
	r.pods["u1"], r.pods["u2"] = started, waiting
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", r.serveContainerLogs)
	verified := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}

	for _, tt := range []struct {
		name, path string
		tls        *tls.ConnectionState
		code       int
		body       string
	}{
		{"ok", "/containerLogs/ns/running/work", verified, 200, "hi\n"},
		{"no client certificate", "/containerLogs/ns/running/work", nil, 401, "client certificate"},
		{"unverified certificate", "/containerLogs/ns/running/work", &tls.ConnectionState{}, 401, "client certificate"},
		{"unknown pod", "/containerLogs/ns/nope/work", verified, 404, "not running on the nodes of s (n)"},
		{"other namespace", "/containerLogs/other/running/work", verified, 404, "not running"},
		{"second container", "/containerLogs/ns/running/sidecar", verified, 400, "only the first container"},
		{"not started", "/containerLogs/ns/waiting/work", verified, 400, "waiting to start: ContainerCreating"},
		{"bad query", "/containerLogs/ns/running/work?tailLines=-3", verified, 400, "tailLines"},
		{"previous", "/containerLogs/ns/running/work?previous=true", verified, 400, "never restarts"},
		{"path traversal", "/containerLogs/ns/..%2F..%2Fetc/work", verified, 404, "not running"},
		{"missing container", "/containerLogs/ns/running", verified, 404, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			req.TLS = tt.tls
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.body) {
				t.Errorf("%s: %d %q, want %d containing %q", tt.path, rec.Code, rec.Body.String(), tt.code, tt.body)
			}
		})
	}
	// Authenticated, well-formed requests count per pod (what
	// Stack.PodLogRequests reports); refused ones never do.
	want := map[string]int{"ns/running": 2, "ns/nope": 1, "other/running": 1, "ns/waiting": 1, "ns/../../etc": 1}
	if diff := cmp.Diff(want, r.logRequests); diff != "" {
		t.Errorf("log requests per pod (-want +got):\n%s", diff)
	}
}
