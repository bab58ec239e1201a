package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/store/pgtest"
)

// BenchmarkStoreVsRawSQL measures work-pod inserts and state updates per
// second through the store, on SQLite and on PostgreSQL, against raw SQL on
// the same database and connection settings running the same statements:
// the same INSERT for inserts, and for state updates the statement
// TransitionWorkPod runs (a compare-and-set UPDATE … RETURNING the row,
// which the event stream publishes), so the ratio is the store's own cost.
// What that statement costs against a bare UPDATE (no state check, nothing
// returned) is reported beside it, and so is UpdateWorkPod, the
// read-modify-write transaction kept for updates that depend on more than
// the state, and a fenced TransitionWorkPod (a spoke owner's: the statement
// also holds the spoke's epoch) against the unfenced one. One goroutine;
// store and raw alternate in chunks so drift hits both alike.
func BenchmarkStoreVsRawSQL(b *testing.B) {
	const n, chunk = 2000, 100
	for b.Loop() {
		for _, db := range []struct{ name, dsn string }{
			{"SQLite", "sqlite:" + filepath.Join(b.TempDir(), "bench.db")},
			{"PostgreSQL", pgtest.NewDatabase(b)},
		} {
			benchStore(b, db.name, db.dsn, n, chunk)
		}
	}
}

func benchStore(b *testing.B, name, dsn string, n, chunk int) {
	b.Helper()
	ctx := b.Context()
	st, err := store.Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	raw, pg := openRaw(b, dsn)
	defer raw.Close()
	insert := `INSERT INTO work_pods (id, cluster, created_at, namespace, kind, state, pod_uid, spec, exit_code, reason, log_collected, updated_at, finished_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	update := `UPDATE work_pods SET updated_at = ?, state = ? WHERE id = ? AND state IN (?) RETURNING ` + store.PodColumnsWithoutSpec
	bare := `UPDATE work_pods SET state = ?, updated_at = ? WHERE id = ?`
	if pg {
		insert, update, bare = dollars(insert), dollars(update), dollars(bare)
	}

	// The raw side prepares its statements once, as the store does: the
	// ratio is the store's own cost, not SQLite parsing the SQL again.
	prepare := func(q string) *sql.Stmt {
		st, err := raw.PrepareContext(ctx, q)
		if err != nil {
			b.Fatalf("%s: prepare: %v", name, err)
		}
		return st
	}
	insertStmt, updateStmt, bareStmt := prepare(insert), prepare(update), prepare(bare)
	defer func() { _, _, _ = insertStmt.Close(), updateStmt.Close(), bareStmt.Close() }()

	var storeIns, rawIns, storeUpd, rawUpd, bareUpd, rmwUpd, fencedUpd time.Duration
	timed := func(total *time.Duration, from int, op func(i int) error) {
		start := time.Now()
		for i := from; i < from+chunk; i++ {
			if err := op(i); err != nil {
				b.Fatalf("%s: %v", name, err)
			}
		}
		*total += time.Since(start)
	}
	storeInsert := func(i int) error {
		_, err := st.CreateWorkPod(ctx, store.WorkPod{ID: fmt.Sprintf("s-%d", i), Cluster: "wharf", Namespace: "crucible", Kind: "turn", State: store.StatePending})
		return err
	}
	// The fenced transitions' rows, made untimed.
	for i := range n {
		if _, err := st.CreateWorkPod(ctx, store.WorkPod{ID: fmt.Sprintf("f-%d", i), Cluster: "wharf", Namespace: "crucible", Kind: "turn", State: store.StatePending}); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
	}
	rawInsert := func(i int) error {
		now := time.Now().UnixNano()
		_, err := insertStmt.ExecContext(ctx, fmt.Sprintf("r-%d", i), "wharf", now, "crucible", "turn", "pending", "", []byte{}, nil, "", false, now, nil)
		return err
	}
	pending := []store.State{store.StatePending}
	storeUpdate := func(i int) error {
		_, err := st.TransitionWorkPod(ctx, fmt.Sprintf("s-%d", i), store.Transition{From: pending, To: store.StateRunning})
		return err
	}
	fenced := store.WithFence(ctx, "wharf", 1)
	fencedUpdate := func(i int) error {
		_, err := st.TransitionWorkPod(fenced, fmt.Sprintf("f-%d", i), store.Transition{From: pending, To: store.StateRunning})
		return err
	}
	rmwUpdate := func(i int) error {
		_, err := st.UpdateWorkPod(ctx, fmt.Sprintf("s-%d", i), func(p *store.WorkPod) error { p.State = store.StateSucceeded; return nil })
		return err
	}
	cols := make([]any, strings.Count(store.PodColumnsWithoutSpec, ",")+1)
	dest := make([]any, len(cols))
	for i := range cols {
		dest[i] = &cols[i]
	}
	rawUpdate := func(i int) error {
		if err := updateStmt.QueryRowContext(ctx, time.Now().UnixNano(), "running", fmt.Sprintf("r-%d", i), "pending").Scan(dest...); err != nil {
			return fmt.Errorf("raw update of r-%d: %w", i, err)
		}
		return nil
	}
	bareUpdate := func(i int) error {
		res, err := bareStmt.ExecContext(ctx, "succeeded", time.Now().UnixNano(), fmt.Sprintf("r-%d", i))
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil || k != 1 {
			return fmt.Errorf("bare update of r-%d: %d rows, %w", i, k, err)
		}
		return nil
	}
	// Which side goes first alternates chunk by chunk: whatever the first
	// of a pair pays (a checkpoint, a cold page) falls on both alike.
	for from := 0; from < n; from += chunk {
		if from/chunk%2 == 0 {
			timed(&storeIns, from, storeInsert)
			timed(&rawIns, from, rawInsert)
		} else {
			timed(&rawIns, from, rawInsert)
			timed(&storeIns, from, storeInsert)
		}
	}
	for from := 0; from < n; from += chunk {
		if from/chunk%2 == 0 {
			timed(&rawUpd, from, rawUpdate)
			timed(&storeUpd, from, storeUpdate)
			timed(&fencedUpd, from, fencedUpdate)
		} else {
			timed(&fencedUpd, from, fencedUpdate)
			timed(&storeUpd, from, storeUpdate)
			timed(&rawUpd, from, rawUpdate)
		}
		timed(&rmwUpd, from, rmwUpdate)
		timed(&bareUpd, from, bareUpdate)
	}
	rate := func(d time.Duration) float64 { return float64(n) / d.Seconds() }
	b.Logf("%s: inserts %.0f/s (raw %.0f/s), state updates %.0f/s (raw, the same statement %.0f/s; a bare UPDATE %.0f/s; fenced %.0f/s, %.2f× unfenced), read-modify-write updates %.0f/s",
		name, rate(storeIns), rate(rawIns), rate(storeUpd), rate(rawUpd), rate(bareUpd), rate(fencedUpd), rate(fencedUpd)/rate(storeUpd), rate(rmwUpd))
	method := fmt.Sprintf("%d work pods, one goroutine, store and raw SQL alternating in chunks of %d (which goes first alternating too) on the same database; both sides prepare their statements once", n, chunk)
	if pg {
		method += " (throwaway PostgreSQL server from pgtest, fsync off)"
	} else {
		method += " (SQLite file, WAL, synchronous NORMAL: the store's settings)"
	}
	rows := []benchreport.Record{
		benchreport.Record{ID: "store", Case: name + " inserts", Unit: "rows/s", Value: rate(storeIns), Goal: "≥ 0.8×",
			Method: method + "; raw: the same INSERT"}.WithBaseline("raw SQL", rate(rawIns)),
		benchreport.Record{ID: "store", Case: name + " state updates", Unit: "updates/s", Value: rate(storeUpd), Goal: "≥ 0.8×",
			Method: method + "; store: TransitionWorkPod pending → running; raw: the statement it runs (UPDATE … WHERE id = ? AND state IN (?) RETURNING the row without its spec), scanned into []any"}.WithBaseline("raw SQL", rate(rawUpd)),
	}
	for _, r := range rows {
		if err := benchreport.Append(r.Judged(r.Ratio >= 0.8)); err != nil {
			b.Fatal(err)
		}
	}
	// Reported, not judged: what the compare-and-set and the returned row
	// cost against the cheapest UPDATE, and the general read-modify-write
	// path, both against that bare UPDATE.
	reported := []benchreport.Record{
		benchreport.Record{ID: "store", Case: name + " state updates vs a bare UPDATE (reported)", Unit: "updates/s", Value: rate(storeUpd), Goal: "report",
			Method: method + "; store: TransitionWorkPod pending → running; raw: UPDATE … SET state, updated_at WHERE id = ? (no state check, nothing returned)"}.WithBaseline("bare UPDATE", rate(bareUpd)),
		benchreport.Record{ID: "store", Case: name + " read-modify-write updates (reported)", Unit: "updates/s", Value: rate(rmwUpd), Goal: "report",
			Method: method + "; store: UpdateWorkPod running → succeeded (one transaction: read the row, call fn, write); raw: the bare UPDATE"}.WithBaseline("bare UPDATE", rate(bareUpd)),
		benchreport.Record{ID: "store", Case: name + " fenced state updates (reported)", Unit: "updates/s", Value: rate(fencedUpd), Goal: "report",
			Method: method + "; store: TransitionWorkPod pending → running under a spoke owner's fence (the same statement, also holding the spoke's epoch in spoke_epochs); baseline: the same transition unfenced"}.WithBaseline("unfenced", rate(storeUpd)),
	}
	for _, r := range reported {
		if err := benchreport.Append(r); err != nil {
			b.Fatal(err)
		}
	}
}

// openRaw opens dsn with database/sql as the store does: for SQLite the
// writer connection's settings (one connection, WAL, synchronous NORMAL,
// busy timeout, immediate transactions).
func openRaw(b *testing.B, dsn string) (*sql.DB, bool) {
	b.Helper()
	if strings.HasPrefix(dsn, "postgres") {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			b.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		return db, true
	}
	path := strings.TrimPrefix(dsn, "sqlite:")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if err := db.PingContext(context.Background()); err != nil {
		b.Fatal(err)
	}
	return db, false
}

// dollars rewrites ? placeholders as PostgreSQL's $1, $2, ...
func dollars(q string) string {
	var out strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			out.WriteString("$" + strconv.Itoa(n))
			continue
		}
		out.WriteRune(r)
	}
	return out.String()
}
