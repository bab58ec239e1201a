package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

// testListPages walks a listing page by page with the cursor of each page's
// last row and must see every row exactly once, in list order, also when
// rows share a creation time and when a filter applies.
func testListPages(t *testing.T, s store.Store) {

	for i := range 7 {
		id := string(rune('a' + i))
		mustCreate(t, s, pod(id, func(p *store.WorkPod) {
			if i%2 == 1 {
				p.Cluster = "dock"
			}
		}))
	}
	tests := []struct {
		name string
		f    store.Filter
		want [][]string
	}{
		{"pages of 3", store.Filter{Limit: 3}, [][]string{{"g", "f", "e"}, {"d", "c", "b"}, {"a"}, {}}},
		{"filtered pages of 2", store.Filter{Cluster: "dock", Limit: 2}, [][]string{{"f", "d"}, {"b"}, {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got [][]string
			f := tc.f
			for range len(tc.want) {
				page, err := s.ListWorkPods(t.Context(), f)
				if err != nil {
					t.Fatalf("list: %v", err)
				}
				pids := []string{}
				for _, p := range page {
					pids = append(pids, p.ID)
				}
				got = append(got, pids)
				if len(page) == 0 {
					break
				}
				last := page[len(page)-1]
				f.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("pages (-want +got):\n%s", diff)
			}
		})
	}
	// Rows with the same creation time are ordered by id: a cursor in the
	// middle of them continues with the next id, not the next time.
	c := mustGet(t, s, "c")
	page, err := s.ListWorkPods(t.Context(), store.Filter{After: &store.Cursor{CreatedAt: c.CreatedAt, ID: "b"}})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	got := []string{}
	for _, p := range page {
		got = append(got, p.ID)
	}
	if diff := cmp.Diff([]string{"c", "b", "a"}, got); diff != "" {
		t.Errorf("after (c's time, b) (-want +got):\n%s", diff)
	}
	if _, err := s.ListWorkPods(t.Context(), store.Filter{After: &store.Cursor{CreatedAt: time.Unix(1<<62, 0)}}); err == nil {
		t.Error("cursor time out of range: got nil error")
	}
}

// testListWithoutSpec: the list view reads every column but the spec.
func testListWithoutSpec(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("big", func(p *store.WorkPod) { p.Spec = []byte(`{"files":{"a":"x"}}`) }))
	full := mustGet(t, s, "big")
	got, err := s.ListWorkPods(t.Context(), store.Filter{WithoutSpec: true})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	want := full
	want.Spec = nil
	if diff := cmp.Diff([]store.WorkPod{want}, got); diff != "" {
		t.Errorf("list without spec (-want +got):\n%s", diff)
	}
}

// testSubmitter: the submitter is stored at create, read back by get and
// list, and kept by updates.
func testSubmitter(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("who", func(p *store.WorkPod) { p.Submitter = "alice@example.com" }), pod("nobody"))
	if got := mustGet(t, s, "who").Submitter; got != "alice@example.com" {
		t.Errorf("submitter = %q, want alice@example.com", got)
	}
	if got := mustGet(t, s, "nobody").Submitter; got != "" {
		t.Errorf("submitter = %q, want empty", got)
	}
	updated, err := s.UpdateWorkPod(t.Context(), "who", func(p *store.WorkPod) error {
		p.State = store.StateRunning
		return nil
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if updated.Submitter != "alice@example.com" || mustGet(t, s, "who").Submitter != "alice@example.com" {
		t.Errorf("submitter lost by update: %q", updated.Submitter)
	}
}
