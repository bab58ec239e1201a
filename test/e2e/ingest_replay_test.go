package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"crucible.dev/crucible/internal/devstack"
)

// replayStoreReadBound is how many row reads 5,000 replays of pod A's token
// against other pods, and the two uploads after them, may cost. No replay
// names the pod its token is bound to, so the pre-check refuses each before
// the store: 0 reads; each upload reads its pod's row once: 2. The bound
// leaves room for other tests' uploads on the shared stack meanwhile; the
// old code read the row once per replay (5,000: seen failing with 5,002).
const replayStoreReadBound = 20

// A pod's valid token, copied and replayed from one address against other
// pods and unknown pod ids: refused without reading the store, and neither
// the pod's own uploads nor another pod's behind the same address are
// refused.
func TestDropBoxReplayedTokenSparesTheStore(t *testing.T) {
	s := sharedStack(t)
	wharf := s.Spoke("wharf")
	client := caClient(t)
	a := workPodOn(t, s, "wharf")
	b := workPodOn(t, s, "wharf")
	tokA := "Bearer " + ingestToken(t, wharf, devstack.SpokeServiceAccount, a.ID, a.PodUID)
	tokB := "Bearer " + ingestToken(t, wharf, devstack.SpokeServiceAccount, b.ID, b.PodUID)
	const source = "198.51.100.77" // one address: the replays' and the pods'

	const series = "crucible_ingest_store_reads_total"
	before := controllerMetricValue(t, s, series)
	var next atomic.Int64
	var codesMu sync.Mutex
	codes := map[int]int{}
	var firstWrong string
	var wg sync.WaitGroup
	const n = 5000
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				target := b.ID
				if i%2 == 1 {
					target = fmt.Sprintf("nosuch-%d", i)
				}
				code, _, msg := upload(t, s, client, target, "result", tokA, source, []byte("x"))
				codesMu.Lock()
				codes[code]++
				if code != http.StatusForbidden && code != http.StatusTooManyRequests && firstWrong == "" {
					firstWrong = fmt.Sprintf("%d %s", code, msg)
				}
				codesMu.Unlock()
			}
		})
	}
	wg.Wait()
	reads := controllerMetricValue(t, s, series) - before
	t.Logf("%d replays of pod A's token against pod B and unknown ids: %.0f store reads", n, reads)
	if w := n - codes[http.StatusForbidden] - codes[http.StatusTooManyRequests]; w > 0 {
		t.Errorf("%d of %d replays answered neither 403 nor 429 (answers by code: %v; the first: %s)", w, n, codes, firstWrong)
	}

	for _, p := range []struct{ name, id, auth string }{{"pod A", a.ID, tokA}, {"pod B", b.ID, tokB}} {
		if code, _, msg := upload(t, s, client, p.id, "result", p.auth, source, []byte("result of "+p.name)); code != http.StatusCreated {
			t.Errorf("%s's own upload from the replays' address: %d %s, want 201", p.name, code, msg)
		}
	}
	reads = controllerMetricValue(t, s, series) - before
	if reads > replayStoreReadBound {
		t.Errorf("%d replays and 2 uploads cost %.0f store reads, want at most %d", n, reads, replayStoreReadBound)
	}
}
