package devstacktest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/store/pgtest"
)

// HALease is the lease of the tests that run two controller replicas:
// short, so a takeover fits a test, long enough that a loaded 2-core
// machine renews in time. The stack's retry period is a sixth of it.
const HALease = 8 * time.Second

// HATakeover bounds a takeover after the leader's SIGKILL. client-go counts
// the lease from when the follower last saw it renewed, and polls every
// retry period with up to 120 % jitter: the follower may see the last
// renewal one jittered period late and the expiry one more, so the bound is
// the lease plus two such periods (and a little for a metric poll).
const HATakeover = HALease + 2*(HALease/6)*22/10 + 2*time.Second

// StartOnPostgres starts a PostgreSQL server of the test's own and a stack
// of its own (Start) whose controller stores in it: opts.ControllerStore is
// set to the server's database. Replicas need such a stack, as does any test
// of the controller's PostgreSQL store. Both stop when the test ends, the
// stack first, so that the controller never sees its database vanish.
func StartOnPostgres(tb testing.TB, opts devstack.Options) (*devstack.Stack, *pgtest.Server) {
	tb.Helper()
	skipShort(tb)
	pg, err := pgtest.Start(tb.Context())
	if err != nil {
		tb.Fatalf("PostgreSQL: %v; %s", err, pgtest.InstallHint)
	}
	tb.Cleanup(func() { _ = pg.Stop() })
	opts.ControllerStore = pg.DSN("postgres")
	return Start(tb, opts), pg
}

// Replicas returns the stack's controller and a second replica of it
// called "b", started beside it on the same store and lease: the two
// processes of an HA deployment. The stack runs leader election on
// PostgreSQL (Options.LeaderElect, StartOnPostgres).
func Replicas(tb testing.TB, s *devstack.Stack) (a, b devstack.Replica) {
	tb.Helper()
	rb, err := s.StartController(tb.Context(), "b")
	if err != nil {
		tb.Fatal(err)
	}
	return s.Controller(), *rb
}

// leaderScrape bounds one read of a replica's metrics: a replica that
// cannot answer in that time is taken for one that does not lead.
const leaderScrape = 5 * time.Second

// Leads reports whether r's crucible_leader gauge reads 1. A replica that
// does not answer (killed, not started yet) does not lead.
func Leads(ctx context.Context, r devstack.Replica) bool {
	ctx, cancel := context.WithTimeout(ctx, leaderScrape)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.MetricsURL+"/metrics", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if sc.Text() == "crucible_leader 1" {
			return true
		}
	}
	return false
}

// SoleLeader polls until exactly one of rs leads and returns it; an error
// when none or several still do after within.
func SoleLeader(ctx context.Context, within time.Duration, rs ...devstack.Replica) (devstack.Replica, error) {
	var leader devstack.Replica
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		n := 0
		for _, r := range rs {
			if Leads(ctx, r) {
				n, leader = n+1, r
			}
		}
		return n == 1, nil
	})
	if err != nil {
		return devstack.Replica{}, fmt.Errorf("no single leader among %d replicas within %s: %w", len(rs), within, err)
	}
	return leader, nil
}
