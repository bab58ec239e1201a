package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// orphanGrace is how long the sweep leaves a pod without a row alone; short,
// so "no orphan after a sweep" is checked within a scenario.
const orphanGrace = 10 * time.Second

// stackOptions are the shared stack's; a scenario with a stack of its own
// starts from them.
func stackOptions() devstack.Options {
	return devstack.Options{
		Crucible:       devstacktest.BuildCrucible,
		Spokes:         []devstack.SpokeOptions{{Name: "wharf"}, {Name: "dock"}},
		MirrorTTL:      time.Second,
		MirrorMaxStale: mirrorMaxStale,
		SweepInterval:  2 * time.Second,
		OrphanGrace:    orphanGrace,
		RetryBudget:    90 * time.Second,
	}
}

func TestMain(m *testing.M) {
	code := devstacktest.Main(m, stackOptions())
	if err := writeResults(os.Getenv("CRUCIBLE_CHAOS_RESULTS")); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: write results:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// config is the load of one run: full (make chaos) or the reduced subset
// that make acceptance runs.
type config struct {
	Full bool
	Pods int   // pods per scenario
	Seed int64 // base seed; each scenario derives its own from it
}

func loadConfig() config {
	c := config{Full: os.Getenv("CRUCIBLE_CHAOS") == "full", Pods: 20, Seed: 1}
	if c.Full {
		c.Pods = 200
		c.Seed = time.Now().UnixNano()
	}
	if v := os.Getenv("CRUCIBLE_CHAOS_SEED"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			c.Seed = n
		}
	}
	if v := os.Getenv("CRUCIBLE_CHAOS_PODS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			c.Pods = n
		}
	}
	return c
}

var cfg = loadConfig()

// rng returns the scenario's random source and logs its seed, so that a
// failing run replays with CRUCIBLE_CHAOS_SEED.
func rng(t *testing.T, scenario int) (*rand.Rand, int64) {
	seed := cfg.Seed + int64(scenario)*1_000_003
	t.Logf("seed %d (replay: CRUCIBLE_CHAOS_SEED=%d, scenario offset %d), %d pods, full=%v", seed, cfg.Seed, scenario, cfg.Pods, cfg.Full)
	return rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>1|1)), seed
}

// fullOnly skips a scenario in the reduced subset.
func fullOnly(t *testing.T) {
	if !cfg.Full {
		t.Skip("runs only with CRUCIBLE_CHAOS=full (make chaos)")
	}
}
