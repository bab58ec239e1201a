package devstacktest

import "time"

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
