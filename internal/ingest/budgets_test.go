package ingest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"crucible.dev/crucible/internal/store"
)

// TestSubmitterAndClusterBudgets (issue 37, deliverable 4): beside the
// total, the artifacts of one submitter's pods and of one cluster's are
// bounded; an upload past either is 507 whose message names the budget's
// key, records nothing, and leaves other submitters and clusters room.
func TestSubmitterAndClusterBudgets(t *testing.T) {
	e := newEnvClusters(t, 2, func(o *Options) { o.MaxBytesPerSubmitter, o.MaxBytesPerCluster = 100, 150 })
	podOf := func(i int, id, submitter string) string {
		t.Helper()
		_, err := e.store.CreateWorkPod(ctxOf(t), store.WorkPod{
			ID: id, Cluster: testClusters[i], Namespace: testNS, Kind: "turn", State: store.StateRunning, PodUID: "uid-" + id, Submitter: submitter,
		})
		if err != nil {
			t.Fatal(err)
		}
		return sign(t, testSpokeKey(i), testSpokeKID[i], podClaims(e.clock.Now(), id, "uid-"+id))
	}
	annA, annB := podOf(0, "ann-a", "ann"), podOf(1, "ann-b", "ann")
	bobA1, bobA2, bobB := podOf(0, "bob-a1", "bob"), podOf(0, "bob-a2", "bob"), podOf(1, "bob-b", "bob")
	steps := []struct {
		name, pod, kind, tok string
		size                 int
		chunked              bool
		want                 int
		budget               string
	}{
		{"ann's first", "ann-a", "result", annA, 60, false, 201, ""},
		{"ann's pod on the other cluster, past ann's budget", "ann-b", "result", annB, 41, false, 507, "max_bytes_per_submitter"},
		{"the same, chunked", "ann-b", "result", annB, 41, true, 507, "max_bytes_per_submitter"},
		{"ann, exactly at her budget", "ann-b", "result", annB, 40, false, 201, ""},
		{"bob has his own room", "bob-a1", "result", bobA1, 80, false, 201, ""},
		{"cluster a holds 140 of 150", "bob-a2", "result", bobA2, 11, false, 507, "max_bytes_per_cluster"},
		{"cluster b has room", "bob-b", "result", bobB, 20, false, 201, ""},
	}
	for _, st := range steps {
		before := e.files(st.pod)
		r := e.request(http.MethodPost, "/api/pods/"+st.pod+"/artifacts/"+st.kind, st.tok, bytes.Repeat([]byte("z"), st.size))
		if st.chunked {
			r.ContentLength = -1
		}
		w := e.serve(r)
		if w.Code != st.want {
			t.Errorf("%s: status %d, want %d (body %s)", st.name, w.Code, st.want, w.Body)
			continue
		}
		if st.want != http.StatusInsufficientStorage {
			continue
		}
		checkFull(t, e, st.name, w, before, st.pod, st.kind)
		var body struct{ Error string }
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || !strings.Contains(body.Error, "the "+st.budget+" budget is full") {
			t.Errorf("%s: body %s does not name the %s budget", st.name, w.Body, st.budget)
		}
	}
}
