package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
)

// upload posts body to the drop-box on the controller's external listener.
// source, if set, is the client address a trusted router would report.
func upload(t *testing.T, s *devstack.Stack, client *http.Client, pod, kind, auth, source string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.Federation.ControllerExternalURL+"/api/pods/"+pod+"/artifacts/"+kind, bytes.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if source != "" {
		req.Header.Set("X-Forwarded-For", source)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

// workPodOn submits a long-running turn on cluster and returns its row.
func workPodOn(t *testing.T, s *devstack.Stack, cluster string) apiv1.WorkPod {
	t.Helper()
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: cluster, Image: "x", Command: sleeps("1h")})
	t.Cleanup(func() { cancelPodQuietly(s, wp.ID) })
	return wp
}

// ingestToken is what the kubelet would project into the work pod: a token
// of loops/<sa> bound to the pod, audience crucible-ingest.
func ingestToken(t *testing.T, spoke *devstack.Cluster, sa, pod, uid string, aud ...string) string {
	t.Helper()
	if len(aud) == 0 {
		aud = []string{devstack.IngestAudience}
	}
	var bound *authenticationv1.BoundObjectReference
	if pod != "" {
		bound = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod, UID: typesUID(uid)}
	}
	tok, err := spoke.TokenRequest(t.Context(), devstack.SpokeNamespace, sa, aud, 600, bound)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func tokenReviews(t *testing.T, spoke *devstack.Cluster) int {
	t.Helper()
	return apiserverMetric(t, spoke, "apiserver_request_total", `resource="tokenreviews"`, `verb="POST"`)
}

// apiserverMetric sums the samples of metric on spoke's API server whose
// labels contain every one of labels.
func apiserverMetric(t testing.TB, spoke *devstack.Cluster, metric string, labels ...string) int {
	t.Helper()
	raw, err := spoke.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, metric+"{") || !all(line, labels) {
			continue
		}
		var v float64
		fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
		n += int(v)
	}
	return n
}

func all(line string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(line, p) {
			return false
		}
	}
	return true
}

func TestDropBoxAcceptsThePodsOwnToken(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	client := caClient(t)
	p := workPodOn(t, s, "wharf")
	tok := ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)
	body := []byte("result of the turn\n")
	code, _, msg := upload(t, s, client, p.ID, "result", "Bearer "+tok, "", body)
	if code != http.StatusCreated {
		t.Fatalf("upload: %d %s", code, msg)
	}
	code, got := apiCall(t, s, http.MethodGet, "/api/pods/"+p.ID+"/artifacts/result", nil)
	sum := sha256.Sum256(body)
	if code != http.StatusOK || !bytes.Equal(got, body) {
		t.Errorf("download: %d %q, want the uploaded bytes", code, got)
	}
	_, list := apiCall(t, s, http.MethodGet, "/api/pods/"+p.ID+"/artifacts", nil)
	if !strings.Contains(string(list), hex.EncodeToString(sum[:])) {
		t.Errorf("artifact list %s lacks sha256 %x", list, sum)
	}
	if code, _, msg := upload(t, s, client, p.ID, "result", "Bearer "+tok, "", body); code != http.StatusOK {
		t.Errorf("same upload again: %d %s, want 200", code, msg)
	}
	if code, _, msg := upload(t, s, client, p.ID, "result", "Bearer "+tok, "", []byte("other bytes")); code != http.StatusConflict {
		t.Errorf("different bytes for the same kind: %d %s, want 409", code, msg)
	}
}

// The spoke API is down: 503 with Retry-After, nothing stored; back up: 201.
func TestDropBoxFailsClosed(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	client := caClient(t)
	p := workPodOn(t, s, "wharf")
	tok := ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)
	restoreSpokeAfter(t, s, wharf)
	if err := s.StopAPIServer(wharf); err != nil {
		t.Fatal(err)
	}
	code, hdr, _ := upload(t, s, client, p.ID, "result", "Bearer "+tok, "", []byte("x"))
	if err := s.StartAPIServer(t.Context(), wharf); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Errorf("spoke down: %d Retry-After %q, want 503 with Retry-After", code, hdr.Get("Retry-After"))
	}
	if code, _ := apiCall(t, s, http.MethodGet, "/api/pods/"+p.ID+"/artifacts/result", nil); code != http.StatusNotFound {
		t.Errorf("an artifact was stored while the spoke was down: %d", code)
	}
	var last int
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last, _, _ = upload(t, s, client, p.ID, "result", "Bearer "+tok, "", []byte("x"))
		return last == http.StatusCreated, nil
	})
	if err != nil {
		t.Errorf("after the spoke came back: %d, want 201", last)
	}
}

// Floods, counted at the spoke: forged tokens never reach it; one rejected
// token reaches it once per negative-cache TTL; 100 valid tokens at most 100
// times; one source past its limit gets 429.
func TestDropBoxFloods(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	client := caClient(t)
	p := workPodOn(t, s, "wharf")
	flood := func(n int, req func(i int) (auth, source string, body []byte), want ...int) {
		t.Helper()
		var (
			next  atomic.Int64
			wg    sync.WaitGroup
			mu    sync.Mutex
			wrong = map[int]int{} // by status code
		)
		for range 16 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					auth, source, body := req(i)
					if code, _, _ := upload(t, s, client, p.ID, "result", auth, source, body); !slices.Contains(want, code) {
						mu.Lock()
						wrong[code]++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if len(wrong) > 0 {
			t.Errorf("requests of %d that did not answer %v, by status: %v", n, want, wrong)
		}
	}
	source := func(i int) string { return fmt.Sprintf("198.51.%d.%d", i/250, i%250+1) }
	forgedKey := mustKey(t)
	forgedToken := func(jti string) string {
		c := hubClaims("system:serviceaccount:loops:crucible-turn", devstack.IngestAudience)
		c["jti"] = jti
		return forged{claims: c}.signRS256(t, forgedKey)
	}

	before := tokenReviews(t, wharf)
	flood(10000, func(i int) (string, string, []byte) {
		return "Bearer " + forgedToken(fmt.Sprint(i)), source(i), nil
	}, http.StatusUnauthorized)
	n := tokenReviews(t, wharf) - before
	t.Logf("10,000 distinct forged tokens: %d TokenReviews", n)
	if n != 0 {
		t.Errorf("10,000 forged tokens caused %d TokenReviews, want 0", n)
	}

	// A token the spoke authenticates as another service account: refused
	// (403) by every review, so remembered by the negative cache.
	if _, err := wharf.Client.CoreV1().ServiceAccounts(devstack.SpokeNamespace).Create(t.Context(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	otherTok := ingestToken(t, wharf, "other", "", "")
	before = tokenReviews(t, wharf)
	start := time.Now()
	flood(10000, func(i int) (string, string, []byte) { return "Bearer " + otherTok, source(i), nil }, http.StatusForbidden)
	allowed := int(time.Since(start)/(10*time.Second)) + 1
	n = tokenReviews(t, wharf) - before
	t.Logf("10,000 requests repeating one rejected token over %s: %d TokenReviews", time.Since(start).Round(time.Second), n)
	if n > allowed {
		t.Errorf("10,000 requests with one rejected token caused %d TokenReviews in %s, want at most %d (one per negative TTL)", n, time.Since(start).Round(time.Second), allowed)
	}

	tokens := make([]string, 100)
	for i := range tokens {
		tokens[i] = ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)
	}
	body := []byte("same result")
	if code, _, msg := upload(t, s, client, p.ID, "result", "Bearer "+tokens[0], source(0), body); code != http.StatusCreated {
		t.Fatalf("first upload: %d %s", code, msg)
	}
	before = tokenReviews(t, wharf)
	// The pod's own request limit answers part of them 429, after the token
	// was checked: they count against the reviews all the same.
	flood(10000, func(i int) (string, string, []byte) { return "Bearer " + tokens[i%100], source(i), body }, http.StatusOK, http.StatusTooManyRequests)
	n = tokenReviews(t, wharf) - before
	t.Logf("10,000 uploads with 100 valid tokens: %d TokenReviews", n)
	if n > 100 {
		t.Errorf("10,000 uploads with 100 valid tokens caused %d TokenReviews, want at most 100", n)
	}

	// Failed authentication spends the source's bucket; authenticated
	// requests spend the pod's.
	limitedBy := func(auth func(i int) string, source func(i int) string) (limited int) {
		for i := range 100 {
			if code, hdr, _ := upload(t, s, client, p.ID, "result", auth(i), source(i), body); code == http.StatusTooManyRequests {
				limited++
				if hdr.Get("Retry-After") == "" {
					t.Errorf("429 without Retry-After")
				}
			}
		}
		return limited
	}
	forgedTok := "Bearer " + forged{claims: hubClaims("system:serviceaccount:loops:crucible-turn", devstack.IngestAudience)}.signRS256(t, forgedKey)
	if n := limitedBy(func(int) string { return forgedTok }, func(int) string { return "203.0.113.7" }); n == 0 {
		t.Errorf("100 quick forged requests from one source were never limited")
	}
	if n := limitedBy(func(int) string { return "Bearer " + tokens[0] }, func(i int) string { return fmt.Sprintf("203.0.114.%d", i+1) }); n == 0 {
		t.Errorf("100 quick uploads of one pod from 100 sources were never limited")
	}
}

func typesUID(s string) types.UID { return types.UID(s) }

// The controller dies in the middle of an upload: no artifact, partial or
// whole, is visible afterwards.
func TestDropBoxCrashMidUpload(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	client := caClient(t)
	p := workPodOn(t, s, "wharf")
	tok := ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)
	// The drop-box must take this pod's uploads first: after another test's
	// outage of wharf it answers 503 until it has fetched wharf's keys again
	// (at most once per MinRefresh).
	if code, msg := uploadRetrying(t, s, client, p.ID, "before", tok, "", []byte("x")); code != http.StatusCreated {
		t.Fatalf("an upload before the crash: %d %s, want 201", code, msg)
	}
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, s.Federation.ControllerExternalURL+"/api/pods/"+p.ID+"/artifacts/partial", pr)
	req.Header.Set("Authorization", "Bearer "+tok)
	done := make(chan struct{})
	var answer string // what the drop-box said, if it answered before the crash
	go func() {
		defer close(done)
		if resp, err := client.Do(req); err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			answer = fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
	}()
	// The handler reads the body only once the token passed; 16 MiB is more
	// than loopback's socket buffers hold, so once written the handler is
	// staging the upload.
	for range 8 {
		if _, err := pw.Write(make([]byte, 2<<20)); err != nil {
			<-done
			t.Fatalf("the drop-box stopped reading the upload before the crash (%v); it answered %q", err, answer)
		}
	}
	if err := s.KillProcess("crucible-controller"); err != nil {
		t.Fatal(err)
	}
	pw.CloseWithError(io.ErrUnexpectedEOF)
	<-done
	if err := s.RestartProcess(t.Context(), "crucible-controller", s.ControllerReady); err != nil {
		t.Fatal(err)
	}
	if code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+p.ID+"/artifacts/partial", nil); code != http.StatusNotFound {
		t.Errorf("artifact after a crash mid-upload: %d %s, want 404", code, body)
	}
	entries, _ := os.ReadDir(filepath.Join(s.Dir, "crucible", "artifacts", p.ID))
	for _, e := range entries {
		switch {
		case e.Name() == "partial" || strings.HasPrefix(e.Name(), "partial."):
			t.Errorf("a partial artifact file is visible: %s", e.Name())
		case strings.HasPrefix(e.Name(), ".partial.tmp-"):
			t.Errorf("the crash's temp file %s was not removed at start", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "crucible", "artifacts", p.ID)); err != nil {
		t.Logf("the upload had not reached the disk (%v): no temp file to clean", err)
	}
}
