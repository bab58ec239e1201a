package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
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

// podLogOnDisk is what the dev runtime wrote to a pod's CRI log so far: the
// test reads it while the spoke's API server (and so pods/log) is down.
func podLogOnDisk(t *testing.T, s *devstack.Stack, spoke, pod string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(s.Dir, "pods", spoke, devstack.SpokeNamespace+"_"+pod+"_*", "*.log"))
	if len(files) != 1 {
		return ""
	}
	data, _ := os.ReadFile(files[0])
	return string(data)
}

// storedLine is what `crucible push` prints on stdout.
var storedLine = regexp.MustCompile(`(?m)^(stored|already stored) (\S+)/(\S+): (\d+) bytes sha256:([0-9a-f]{64})$`)

// A pod runs `crucible push result out.json` with nothing but its own
// projected token, while the spoke's API server is down (so the drop-box
// cannot review the token): push waits and succeeds once the API server is
// back; the artifact is readable with the sha256 push printed; the same
// command again answers 200 (already stored).
func TestPushFromThePodWithItsOwnToken(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	g := newGate(t)
	body := `{"answer": 42}` + "\n"
	p := gatedPod(t, s, "wharf", g, `set -e; printf '{"answer": 42}\n' > out.json; `+awaitGate("down")+
		`crucible push result out.json; crucible push result out.json`)
	waitRunning(t, s, p.ID)
	restoreSpokeAfter(t, s, wharf)
	if err := s.StopAPIServer(wharf); err != nil {
		t.Fatal(err)
	}
	g.open(t, "down")
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(podLogOnDisk(t, s, "wharf", p.ID), "503 Service Unavailable"), nil
	})
	if startErr := s.StartAPIServer(t.Context(), wharf); startErr != nil {
		t.Fatal(startErr)
	}
	if err != nil {
		t.Fatalf("push in the pod never reported a 503 while the spoke was down; its log: %q", podLogOnDisk(t, s, "wharf", p.ID))
	}
	done := waitState(t, s, p.ID, "succeeded", 3*time.Minute)
	if !done.LogCollected {
		t.Fatalf("pod %+v: log not collected", done)
	}
	_, log := apiCall(t, s, http.MethodGet, "/api/pods/"+p.ID+"/artifacts/log", nil)
	got := storedLine.FindAllStringSubmatch(string(log), -1)
	if len(got) != 2 || got[0][1] != "stored" || got[1][1] != "already stored" {
		t.Fatalf("pod log %q: want one stored and then one already stored line", log)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(body)))
	for _, m := range got {
		if m[2] != p.ID || m[3] != "result" || m[4] != strconv.Itoa(len(body)) || m[5] != sum {
			t.Errorf("push printed %q, want %s/result: %d bytes sha256:%s", m[0], p.ID, len(body), sum)
		}
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.Federation.ControllerInternalURL+"/api/pods/"+p.ID+"/artifacts/result", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Crucible-SHA256") != got[0][5] || string(stored) != body {
		t.Errorf("artifact: %d sha256 %q %q, want 200 %s %q", resp.StatusCode, resp.Header.Get("X-Crucible-SHA256"), stored, got[0][5], body)
	}
}
