package store

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/store/pgtest"
)

// TestPlacedRowsUseTheirIndex: the replicas' count of placements in flight
// (a list of the placed rows created since a moment) reads the partial
// index of placed rows on both databases, never the state index that walks
// every live row to find the few placed ones. The list asks no state:
// with one, SQLite (which keeps no statistics) plans on the state index
// and sorts in a temporary B-tree; the caller keeps the states it wants.
func TestPlacedRowsUseTheirIndex(t *testing.T) {
	q, args, err := listQuery(Filter{Placed: true, CreatedSince: time.Now().Add(-2 * time.Minute), WithoutSpec: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("sqlite", func(t *testing.T) {
		s, err := openSQLite(t.Context(), filepath.Join(t.TempDir(), "plan.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		plan := explain(t, s, `EXPLAIN QUERY PLAN `+q, args)
		if !strings.Contains(plan, "work_pods_placed") || strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("plan of %s:\n%s\nwant a search of work_pods_placed, in its order", q, plan)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		s, err := openPostgres(t.Context(), pgtest.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		// 5,000 live rows named to their cluster, none placed, as a
		// controller holding pods has them; ANALYZE gives the planner
		// what production's autovacuum would.
		if _, err := s.w.ExecContext(t.Context(), `INSERT INTO work_pods (id, cluster, namespace, kind, state, spec, created_at, updated_at)
			SELECT 'turn-' || i, 'wharf', 'loop', 'turn', 'dispatched', '{}', $1::bigint - i, $1::bigint - i FROM generate_series(1, 5000) AS i`, time.Now().UnixNano()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.w.ExecContext(t.Context(), `ANALYZE work_pods`); err != nil {
			t.Fatal(err)
		}
		plan := explain(t, s, `EXPLAIN `+s.d.rebind(q), args)
		if !strings.Contains(plan, "work_pods_placed") {
			t.Errorf("plan of %s:\n%s\nwant a scan of work_pods_placed", q, plan)
		}
	})
}

// explain returns the plan's lines, one per row, every column joined.
func explain(t *testing.T, s *sqlStore, q string, args []any) string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		var line []string
		for _, v := range vals {
			line = append(line, strings.TrimSpace(fmt.Sprint(v)))
		}
		out = append(out, strings.Join(line, " "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "\n")
}
