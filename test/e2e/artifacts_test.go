package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/devstack"
)

// uploadRetrying is upload as `crucible push` does it: 429 and 503 are
// retried after their Retry-After, within a minute.
func uploadRetrying(t *testing.T, s *devstack.Stack, client *http.Client, pod, kind, tok, source string, body []byte) (int, string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, hdr, msg := upload(t, s, client, pod, kind, "Bearer "+tok, source, body)
		if (code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable) || time.Now().After(deadline) {
			return code, msg
		}
		after, _ := strconv.Atoi(hdr.Get("Retry-After"))
		time.Sleep(time.Duration(max(after, 1)) * time.Second)
	}
}

// podArtifactFiles lists the controller's files for pod (temp files too).
func podArtifactFiles(t *testing.T, s *devstack.Stack, pod string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.Dir, "crucible", "artifacts", pod))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// The reproduced attack: a running pod uploads kind "log" with its own
// token. It is refused, naming the kind, and the log stored when the pod
// ends is the spoke's.
func TestDropBoxKeepsTheRealLog(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	client := caClient(t)
	wp := submit(t, s, apiv1.SubmitRequest{Cluster: "wharf", Image: "x",
		Command: []string{"sh", "-c", "echo the real log line; sleep 6; echo its last line"}})
	tok := ingestToken(t, wharf, devstack.SpokeServiceAccount, wp.ID, wp.PodUID)
	for _, kind := range []string{"log", "crucible-log"} {
		code, _, msg := upload(t, s, client, wp.ID, kind, "Bearer "+tok, "", []byte("forged log\n"))
		var answer struct{ Error string }
		_ = json.Unmarshal([]byte(msg), &answer)
		if code != http.StatusForbidden || !strings.Contains(answer.Error, fmt.Sprintf("kind %q is reserved", kind)) {
			t.Errorf("upload of %s: %d %s, want 403 naming the kind", kind, code, msg)
		}
	}
	// What the spoke serves, read to the end while the pod runs (the sweep
	// deletes the pod soon after its log is collected; before it runs the
	// spoke has no log to serve).
	waitRunning(t, s, wp.ID)
	spokeLog, err := wharf.Client.CoreV1().Pods(devstack.SpokeNamespace).GetLogs(wp.ID, &corev1.PodLogOptions{Follow: true}).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := "the real log line\nits last line\n"; string(spokeLog) != want {
		t.Errorf("the spoke served %q, want %q", spokeLog, want)
	}
	waitState(t, s, wp.ID, "succeeded", time.Minute)
	code, body := apiCall(t, s, http.MethodGet, "/api/pods/"+wp.ID+"/artifacts/log", nil)
	if code != http.StatusOK || string(body) != string(spokeLog) {
		t.Errorf("log artifact: %d %q, want the spoke's log %q", code, body, spokeLog)
	}
	// Collected: the row takes no more uploads.
	if code, _, _ := upload(t, s, client, wp.ID, "late", "Bearer "+tok, "", []byte("x")); code != http.StatusForbidden {
		t.Errorf("upload after collection: %d, want 403", code)
	}
}

// 50 uploads of different bytes for one kind at once: one 201, 49 × 409,
// and the bytes served hash to the recorded sha256.
func TestDropBoxConcurrentUploadsOneWins(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	client := caClient(t)
	p := workPodOn(t, s, "wharf")
	tok := ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int]int{}
	)
	for i := range 50 {
		wg.Go(func() {
			body := bytes.Repeat([]byte(fmt.Sprintf("writer %02d\n", i)), 1000+i)
			code, _ := uploadRetrying(t, s, client, p.ID, "result", tok, fmt.Sprintf("198.51.100.%d", i+1), body)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if diff := cmp.Diff(map[int]int{201: 1, 409: 49}, codes); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.Federation.ControllerInternalURL+"/api/pods/"+p.ID+"/artifacts/result", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	served, _ := io.ReadAll(resp.Body)
	sum := sha256.Sum256(served)
	if got, recorded := hex.EncodeToString(sum[:]), resp.Header.Get("X-Crucible-SHA256"); resp.StatusCode != 200 || got != recorded {
		t.Errorf("served %d bytes with sha256 %s, recorded %s (status %d)", len(served), got, recorded, resp.StatusCode)
	}
	if files := podArtifactFiles(t, s, p.ID); len(files) != 1 {
		t.Errorf("artifact files %v, want only the recorded one", files)
	}
}

// Past the per-pod kind quota (32): a clear 413, and nothing is written.
func TestDropBoxQuota(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	client := caClient(t)
	p := workPodOn(t, s, "wharf")
	tok := ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)
	for i := range 32 {
		if code, msg := uploadRetrying(t, s, client, p.ID, fmt.Sprintf("k%02d", i), tok, "198.51.101.1", []byte("x")); code != http.StatusCreated {
			t.Fatalf("kind %d: %d %s", i, code, msg)
		}
	}
	before := podArtifactFiles(t, s, p.ID)
	code, msg := uploadRetrying(t, s, client, p.ID, "one-more", tok, "198.51.101.1", make([]byte, 1<<20))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "quota") {
		t.Errorf("33rd kind: %d %s, want 413 naming the quota", code, msg)
	}
	if diff := cmp.Diff(before, podArtifactFiles(t, s, p.ID)); diff != "" {
		t.Errorf("files changed by the refused upload (-before +after):\n%s", diff)
	}
}

// A 64 MiB upload (the default body limit) at 1 MiB every 600 ms takes 38 s:
// longer than the 30 s whole-request read timeout of crucible's other
// listeners and than one 30 s window of the drop-box's minimum rate, which it
// keeps; it succeeds. On a stack of its own (make acceptance): 40 s of
// wall time.
func TestDropBoxSlowLargeUpload(t *testing.T) {
	if testing.Short() {
		t.Skip("40 s of wall time")
	}
	t.Parallel()
	s := ownStack(t, stackOptions())
	wharf := s.Spoke("wharf")
	client := caClientFor(t, s)
	p := workPodOn(t, s, "wharf")
	tok := ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)
	const size = 64 << 20
	pr, pw := io.Pipe()
	h := sha256.New()
	go func() {
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		tick := time.NewTicker(600 * time.Millisecond)
		defer tick.Stop()
		for range size / len(chunk) {
			h.Write(chunk)
			if _, err := pw.Write(chunk); err != nil {
				return
			}
			<-tick.C
		}
		pw.Close()
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.Federation.ControllerExternalURL+"/api/pods/"+p.ID+"/artifacts/big", pr)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.ContentLength = size
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("slow 64 MiB upload: %d, want 201", resp.StatusCode)
	}
	_, list := apiCall(t, s, http.MethodGet, "/api/pods/"+p.ID+"/artifacts", nil)
	if want := hex.EncodeToString(h.Sum(nil)); !strings.Contains(string(list), want) {
		t.Errorf("artifact list %s lacks sha256 %s", list, want)
	}
}
