package store_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/pgtest"
)

// BenchmarkClaimBudgets measures what the submitter's and the cluster's
// budgets add to a claim: 10,000 pods with one artifact each, all of one
// submitter on one cluster (the sums' worst case: every row counts), and
// another submitter's pod on another cluster whose artifact takes the total
// past the budgets (else the sums are skipped), then claims with the total
// alone and with all three budgets, alternating.
func BenchmarkClaimBudgets(b *testing.B) {
	const pods, claims = 10000, 200
	for b.Loop() {
		for _, db := range []struct{ name, dsn string }{
			{"SQLite", "sqlite:" + filepath.Join(b.TempDir(), "bench.db")},
			{"PostgreSQL", pgtest.NewDatabase(b)},
		} {
			st, err := store.Open(b.Context(), db.dsn)
			if err != nil {
				b.Fatal(err)
			}
			for i := range pods + 2*claims {
				id := fmt.Sprintf("bp-%05d", i)
				p := store.WorkPod{ID: id, Cluster: "wharf", Namespace: "crucible", Kind: "turn", State: store.StateRunning, Submitter: "ann", Spec: []byte("{}")}
				if _, err := st.CreateWorkPod(b.Context(), p); err != nil {
					b.Fatal(err)
				}
				if i < pods {
					put(b, st, id, store.Quota{})
				}
			}
			big := store.WorkPod{ID: "bp-big", Cluster: "dock", Namespace: "crucible", Kind: "turn", State: store.StateRunning, Submitter: "bob", Spec: []byte("{}")}
			if _, err := st.CreateWorkPod(b.Context(), big); err != nil {
				b.Fatal(err)
			}
			if _, err := st.PutArtifact(b.Context(), store.Artifact{PodID: big.ID, Kind: "result", Size: 1 << 20, SHA256: zeros, Source: store.SourcePod}, store.Quota{}); err != nil {
				b.Fatal(err)
			}
			total := store.Quota{MaxTotalBytes: 1 << 40}
			all := store.Quota{MaxTotalBytes: 1 << 40, MaxSubmitterBytes: 1 << 19, MaxClusterBytes: 1 << 19}
			var took [2]time.Duration
			for i := range 2 * claims {
				q := []store.Quota{total, all}[i%2]
				start := time.Now()
				put(b, st, fmt.Sprintf("bp-%05d", pods+i), q)
				took[i%2] += time.Since(start)
			}
			b.ReportMetric(float64(took[0].Microseconds())/claims, db.name+"-total-µs/claim")
			b.ReportMetric(float64(took[1].Microseconds())/claims, db.name+"-budgets-µs/claim")
			st.Close()
		}
	}
}

func put(b *testing.B, st store.Store, pod string, q store.Quota) {
	b.Helper()
	a := store.Artifact{PodID: pod, Kind: "result", Size: 10, SHA256: zeros, Source: store.SourcePod}
	if _, err := st.PutArtifact(b.Context(), a, q); err != nil {
		b.Fatal(err)
	}
}

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"
