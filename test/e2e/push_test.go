package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/cli"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// push runs `crucible push` in-process as a pod would, with the pod's
// token in a file.
func push(t *testing.T, s *devstack.Stack, pod, tokenFile, kind, file string, stderr *syncBuffer) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := cli.Run(t.Context(), []string{"push", "--url", s.Federation.ControllerExternalURL, "--pod", pod,
		"--token-file", tokenFile, "--ca-file", s.CAFile, "--timeout", "2m", kind, file}, &out, stderr)
	return out.String(), err
}

// A pod's own bound token is all `crucible push` needs: 201, the artifact
// readable with the sha256 push printed; again 200; with the spoke's API
// down, push waits and succeeds once it is back.
func TestPushWithThePodsOwnToken(t *testing.T) {
	s := devstacktest.Shared(t)
	wharf := s.Spoke("wharf")
	p := workPodOn(t, s, "wharf")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)), 0o600); err != nil {
		t.Fatal(err)
	}
	result := filepath.Join(dir, "out.json")
	body := []byte(`{"answer": 42}` + "\n")
	if err := os.WriteFile(result, body, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(body))

	out, err := push(t, s, p.ID, tokenFile, "result", result, &syncBuffer{})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if want := fmt.Sprintf("stored %s/result: %d bytes sha256:%s\n", p.ID, len(body), sum); out != want {
		t.Errorf("push printed %q, want %q", out, want)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.Federation.ControllerInternalURL+"/api/pods/"+p.ID+"/artifacts/result", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Crucible-SHA256") != sum {
		t.Errorf("artifact: %d sha256 %q, want 200 %s", resp.StatusCode, resp.Header.Get("X-Crucible-SHA256"), sum)
	}
	out, err = push(t, s, p.ID, tokenFile, "result", result, &syncBuffer{})
	if err != nil || !strings.HasPrefix(out, "already stored ") {
		t.Errorf("same push again: %q %v, want already stored (200)", out, err)
	}

	// A fresh token (the kubelet rotated it), so that the drop-box's
	// accept cache cannot answer without the spoke.
	if err := os.WriteFile(tokenFile, []byte(ingestToken(t, wharf, devstack.SpokeServiceAccount, p.ID, p.PodUID)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.StopAPIServer(wharf); err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := push(t, s, p.ID, tokenFile, "late", result, stderr)
		done <- err
	}()
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(stderr.String(), "503"), nil
	})
	if startErr := s.StartAPIServer(t.Context(), wharf); startErr != nil {
		t.Fatal(startErr)
	}
	if err != nil {
		t.Fatalf("push never reported a 503 while the spoke was down: %q", stderr.String())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("push after the spoke came back: %v (%s)", err, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("push never finished")
	}
	if code, _ := apiCall(t, s, http.MethodGet, "/api/pods/"+p.ID+"/artifacts/late", nil); code != 200 {
		t.Errorf("artifact late: %d, want 200", code)
	}
}
