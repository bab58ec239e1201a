package store_test

import (
	"testing"

	"crucible.dev/crucible/internal/store"
)

// A pod's history goes with its row: deleting the row (nothing in
// crucible does today; an operator's cleanup might) leaves no entry
// behind, on both backends.
func TestHistoryDeletedWithItsRow(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			dsn, raw := b.fresh(t)
			s, err := store.Open(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.CreateWorkPod(t.Context(), store.WorkPod{ID: "gone", Cluster: "c", State: store.StatePending}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.ObservePod(t.Context(), "gone", store.Observation{Waiting: &store.Waiting{Reason: "Unschedulable"}}); err != nil {
				t.Fatal(err)
			}
			if h, err := s.PodHistory(t.Context(), "gone"); err != nil || len(h) != 2 {
				t.Fatalf("history %+v, %v; want the creation and the wait", h, err)
			}
			if b.name == "sqlite" { // SQLite enforces foreign keys per connection, when asked
				raw.SetMaxOpenConns(1)
				if _, err := raw.ExecContext(t.Context(), `PRAGMA foreign_keys = ON`); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := raw.ExecContext(t.Context(), `DELETE FROM work_pods WHERE id = 'gone'`); err != nil {
				t.Fatal(err)
			}
			var left int
			if err := raw.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pod_history WHERE pod_id = 'gone'`).Scan(&left); err != nil || left != 0 {
				t.Errorf("%d history entries left of the deleted row (%v)", left, err)
			}
		})
	}
}
