package chaos

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/reconcile"
)

// pushCommand is a pod's work in scenario 11: it prints done, then pushes
// n-1 artifacts a1… of pushBody's bytes one after the other, then its
// result (n pushes in all).
func pushCommand(n int) []string {
	return []string{"sh", "-c", fmt.Sprintf(`set -e; sleep 2; echo done; i=1
while [ $i -lt %d ]; do yes "$CHAOS_KEY-$i" | head -c %d > a.txt; crucible push "a$i" a.txt; i=$((i+1)); done
printf '%%s\n' "$CHAOS_KEY" > result.txt; crucible push result result.txt`, n, pushSize)}
}

// pushSize is the size of each pushed artifact but the result.
const pushSize = 4096

// pushBody is what pushCommand pushes as a<i> for the pod keyed key.
func pushBody(key string, i int) []byte {
	line := key + "-" + strconv.Itoa(i) + "\n"
	return []byte(strings.Repeat(line, pushSize/len(line)+1)[:pushSize])
}

// The dock spoke's kube-apiserver flaps (stopped for 2–4 s, up for 3–6 s)
// while every pod of a large wave pushes many artifacts: pushes that reach
// the drop-box while dock cannot review tokens get 503 and are retried by
// `crucible push` until they are stored; every artifact accepted is
// readable with its bytes and sha256; none is lost, none refused with
// 401/403 or stored with other bytes.
func TestChaos11PushesWhileSpokeFlaps(t *testing.T) {
	pods, perPod := faultsFor(20, 500), faultsFor(5, 20)
	var before map[string]int
	scenario{
		num: 11, name: "pushes from every pod while one spoke flaps", pods: pods,
		injected: "dock's kube-apiserver stopped as soon as a pod runs on it (4–6 s, so that pod's first push needs dock's TokenReview), then stopped for 2–4 s and started again (3–6 s up) over and over until the wave was submitted and a few cycles more",
		expected: "every pod completes once; every push stored with its bytes and sha256 (pushes answered 503 retried until stored); no 401, 403 or 409 from the drop-box",
		load: fmt.Sprintf("%d pods over 2 spokes, %d concurrent submitters; each `sleep 2; echo done` then %d sequential `crucible push` (%d of %d bytes, then result): %d pushes",
			pods, submitters, perPod, perPod-1, pushSize, pods*perPod),
		bites: true,
		setup: func(t *testing.T, s *devstack.Stack, w *wave) {
			w.command = pushCommand(perPod)
			var err error
			if before, err = ingestOutcomes(t.Context(), s); err != nil {
				t.Fatal(err)
			}
		},
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			dock := s.Spoke("dock")
			// The first outage starts as soon as a pod runs on dock: its
			// first push, two seconds on, needs dock's TokenReview, so the
			// fault reaches the drop-box whatever the machine's pace.
			if err := waitPodRunning(ctx, dock, 3*time.Minute); err != nil {
				return 0, err
			}
			n, after := 0, 0
			for after < faultsFor(3, 10) && ctx.Err() == nil {
				if n > 0 {
					between(ctx, r, 3*time.Second, 6*time.Second)
				}
				if err := s.StopAPIServer(dock); err != nil {
					return n, err
				}
				if n == 0 {
					between(ctx, r, 4*time.Second, 6*time.Second)
				} else {
					between(ctx, r, 2*time.Second, 4*time.Second)
				}
				if err := startAPIServer(context.WithoutCancel(ctx), s, dock); err != nil {
					return n, err
				}
				n++
				select {
				case <-w.submitted:
					after++
				default:
				}
			}
			return n, nil
		},
		check: func(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, o *outcome) {
			checkPushes(ctx, t, s, w, o, perPod, before)
		},
	}.run(t)
}

// waitPodRunning polls until a pod of the wave runs on spoke.
func waitPodRunning(ctx context.Context, spoke *devstack.Cluster, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	sel := reconcile.Selector(devstack.Instance).String()
	for {
		list, err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err == nil {
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("no pod running on %s within %s: %w", spoke.Name, within, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkPushes reads back every artifact a1… of every accepted pod (the
// wave checked result), and compares the drop-box's answers during the wave
// with what was pushed.
func checkPushes(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, o *outcome, perPod int, before map[string]int) {
	problem := func(f string, a ...any) { o.Problems = append(o.Problems, fmt.Sprintf(f, a...)) }
	w.mu.Lock()
	acked := append([]job(nil), w.acked...)
	w.mu.Unlock()
	for _, j := range acked {
		key := strings.TrimSuffix(string(j.Body), "\n")
		for i := 1; i < perPod; i++ {
			o.ArtifactsPushed++
			ok, err := w.c.artifactIntact(ctx, j.ID, "a"+strconv.Itoa(i), pushBody(key, i))
			switch {
			case err != nil:
				problem("artifact a%d of %s: %v", i, j.ID, err)
			case ok:
				o.ArtifactsStored++
			default:
				problem("artifact a%d of %s missing or not its bytes", i, j.ID)
			}
		}
	}
	after, err := ingestOutcomes(ctx, s)
	if err != nil {
		problem("drop-box answers: %v", err)
		return
	}
	delta := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			delta[k] = d
			o.Requests["drop-box "+k] = d
		}
	}
	t.Logf("drop-box answers during the wave: %v", delta)
	for _, bad := range []string{"unauthorized", "forbidden", "conflict", "reserved", "quota", "bad_request", "too_large"} {
		if delta[bad] > 0 {
			problem("the drop-box answered %d pushes %s", delta[bad], bad)
		}
	}
	if delta["unavailable"] == 0 {
		problem("no push was answered 503: the flaps never reached the drop-box")
	}
	// Every row's pod pushed each kind once, stored once (a retry of a push
	// whose answer was lost is a duplicate, 200).
	rows := len(acked) + o.UnackedRows["succeeded"]
	if want := rows * perPod; delta["created"] != want {
		problem("the drop-box created %d artifacts, want %d (%d rows × %d)", delta["created"], want, rows, perPod)
	}
}

// ingestOutcomes reads crucible_ingest_requests_total by outcome from the
// controller's metrics.
func ingestOutcomes(ctx context.Context, s *devstack.Stack) (map[string]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Federation.ControllerMetricsURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	const prefix = `crucible_ingest_requests_total{outcome="`
	m := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		outcome, v, ok := strings.Cut(rest, `"} `)
		if !ok {
			return nil, fmt.Errorf("metrics line %q", sc.Text())
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", outcome, err)
		}
		m[outcome] = int(f)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return m, nil
}
