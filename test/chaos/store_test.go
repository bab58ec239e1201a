package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite": the controller's own store, read as it was left

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
	"crucible.dev/crucible/internal/store/pgtest"
)

// pgStack starts a stack of the scenario's own whose controller stores in a
// PostgreSQL server of its own, tuned as the shared stack is (TestMain), and
// with leader election for HA. Both stop when the test ends, the stack first.
func pgStack(t *testing.T, leaderElect bool, lease time.Duration) (*devstack.Stack, *pgtest.Server) {
	t.Helper()
	return devstacktest.StartOnPostgres(t, devstack.Options{
		Crucible:       devstacktest.BuildCrucible,
		Spokes:         []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock"}},
		MirrorTTL:      time.Second,
		MirrorMaxStale: 30 * time.Second,
		SweepInterval:  2 * time.Second,
		OrphanGrace:    orphanGrace,
		RetryBudget:    90 * time.Second,
		// Its own tests' progress lines would drown the scenario's.
		Progress:      func(string, ...any) {},
		LeaderElect:   leaderElect,
		SingleLeader:  leaderElect, // scenario 10: the one leader killed
		LeaseDuration: lease,
	})
}

// The PostgreSQL server is halted as a crash would halt it (immediate
// shutdown, connections cut) and started again while submits keep coming:
// submits during the outage are answered 503 and submitted again; no row
// acknowledged before is lost, no pod runs twice, every row ends.
func TestChaos8PostgresRestarted(t *testing.T) {
	var pg *pgtest.Server
	scenario{
		num: 8, name: "PostgreSQL restarted under load",
		injected: "the controller's PostgreSQL halted (SIGQUIT: immediate shutdown, as a crash) for 3–6 s and resumed (crash recovery) while submits, dispatches, awaits and pushes run",
		expected: "submits during the outage answered 503 and submitted again; every accepted pod runs once, ends succeeded with its log and artifact; every row terminal",
		spread:   time.Duration(faultsFor(15, 60)) * time.Second,
		// A submit whose row could not be written is refused with 503
		// (retry later); nothing else may reach a caller.
		transient: []int{503},
		stack: func(t *testing.T) *devstack.Stack {
			s, p := pgStack(t, false, 0)
			pg = p
			return s
		},
		check: func(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, o *outcome) {
			// The outages overlap the paced submits: a run without a 503
			// tested nothing (or the store's errors reached callers as
			// something else, which run reports).
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.resubmitted[503] == 0 {
				o.Problems = append(o.Problems, "no submit was answered 503: the outage never reached a caller")
			}
		},
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			n := faultsFor(1, 3)
			for i := range n {
				between(ctx, r, 2*time.Second, time.Duration(faultsFor(5, 15))*time.Second)
				if err := pg.Halt(); err != nil {
					return i, fmt.Errorf("halt postgres: %w", err)
				}
				between(ctx, r, 3*time.Second, 6*time.Second)
				if err := pg.Resume(context.WithoutCancel(ctx)); err != nil {
					return i, fmt.Errorf("resume postgres: %w", err)
				}
				t.Logf("PostgreSQL restarted (%d of %d)", i+1, n)
			}
			return n, nil
		},
	}.run(t)
}

// The controller on SQLite is SIGKILLed while it writes hardest (submits
// from eight clients at once, then dispatch, state, log and artifact
// writes). Each time, before it restarts, the database as the kill left it
// opens, passes PRAGMA integrity_check and holds every row acknowledged
// before the kill; at the end every row seen then is still there.
func TestChaos8SQLiteKilledMidWrite(t *testing.T) {
	var crashes []crashView
	scenario{
		num: 8, name: "SQLite controller SIGKILLed mid-write",
		injected: "SIGKILL of crucible-controller (SQLite store) while eight submitters write at once (full form), and among dispatch, state, log and artifact writes; the database checked as the kill left it, then the controller restarted",
		expected: "the database opens, integrity_check ok, every row acknowledged before a kill present; every accepted pod runs once, ends succeeded with its log and artifact",
		inject: func(ctx context.Context, t *testing.T, s *devstack.Stack, r *rand.Rand, w *wave) (int, error) {
			n := faultsFor(1, 5)
			for i := range n {
				switch {
				case i == 0 && cfg.Full:
					// Among the submits: after a seeded share has been
					// acknowledged, while the others are being written.
					atAcked(ctx, w, 1+r.IntN(max(1, w.n/2)))
				case i == 0:
					// The reduced form kills among the state, log and
					// artifact writes of pods starting and ending: a
					// submit cut mid-request leaves a row that is
					// dispatched only after the dispatch timeout (two
					// minutes here), too long for make acceptance.
					w.awaitSubmitted(ctx)
					between(ctx, r, 500*time.Millisecond, 2500*time.Millisecond)
				default:
					between(ctx, r, 500*time.Millisecond, time.Duration(faultsFor(4, 8))*time.Second)
				}
				if err := s.KillProcess("crucible-controller"); err != nil {
					return i, err
				}
				cv, err := inspectSQLite(ctx, sqlitePath(s), w)
				if err != nil {
					return i, fmt.Errorf("after kill %d: %w", i+1, err)
				}
				crashes = append(crashes, cv)
				t.Logf("kill %d: integrity %q, %d rows of the wave in the database, %d acknowledged before the kill, %d of them missing",
					i+1, cv.integrity, len(cv.rows), cv.acked, len(cv.missing))
				if err := s.RestartProcess(ctx, "crucible-controller", s.ControllerReady); err != nil {
					return i, err
				}
			}
			return n, nil
		},
		check: func(ctx context.Context, t *testing.T, s *devstack.Stack, w *wave, o *outcome) {
			problem := func(f string, a ...any) { o.Problems = append(o.Problems, fmt.Sprintf(f, a...)) }
			end, err := inspectSQLite(ctx, sqlitePath(s), w)
			if err != nil {
				problem("the database after the wave: %v", err)
				return
			}
			if end.integrity != "ok" {
				problem("integrity_check after the wave: %s", end.integrity)
			}
			for i, cv := range crashes {
				if cv.integrity != "ok" {
					problem("integrity_check after kill %d: %s", i+1, cv.integrity)
				}
				if len(cv.missing) > 0 {
					problem("after kill %d, %d rows acknowledged before it are not in the database: %v", i+1, len(cv.missing), cv.missing)
				}
				for id := range cv.rows {
					if !end.rows[id] {
						problem("row %s, in the database after kill %d, is gone at the end", id, i+1)
					}
				}
			}
			if len(crashes) == 0 {
				problem("no kill was inspected")
			}
		},
	}.run(t)
}

func sqlitePath(s *devstack.Stack) string { return filepath.Join(s.Dir, "crucible", "crucible.db") }

// atAcked waits until at least n of the wave's submits were acknowledged, or
// all were submitted, or ctx ends.
func atAcked(ctx context.Context, w *wave, n int) {
	for {
		w.mu.Lock()
		acked := len(w.acked)
		w.mu.Unlock()
		if acked >= n {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.submitted:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// crashView is the SQLite database as one look found it.
type crashView struct {
	integrity string
	rows      map[string]bool // the wave's rows (not those from before it)
	acked     int             // submits acknowledged before the look
	missing   []string        // acknowledged rows not in the database
}

// inspectSQLite opens the controller's database (after a kill: as the kill
// left it; SQLite replays its WAL on open), runs integrity_check and reads
// the wave's rows. The acknowledged rows are read first: each was committed
// before its 201 was sent, so each must be there.
func inspectSQLite(ctx context.Context, path string, w *wave) (crashView, error) {
	w.mu.Lock()
	acked := make([]string, len(w.acked))
	for i, j := range w.acked {
		acked[i] = j.ID
	}
	w.mu.Unlock()
	cv := crashView{rows: map[string]bool{}, acked: len(acked)}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		return cv, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&cv.integrity); err != nil {
		return cv, fmt.Errorf("integrity_check: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT id FROM work_pods`)
	if err != nil {
		return cv, fmt.Errorf("read rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return cv, fmt.Errorf("read rows: %w", err)
		}
		if !w.before[id] {
			cv.rows[id] = true
		}
	}
	if err := rows.Err(); err != nil {
		return cv, fmt.Errorf("read rows: %w", err)
	}
	for _, id := range acked {
		if !cv.rows[id] {
			cv.missing = append(cv.missing, id)
		}
	}
	return cv, nil
}
