package fleet

import (
	"context"
	"testing"
	"time"
)

func TestNextProbe(t *testing.T) {
	const every = 15 * time.Second
	tests := []struct {
		name               string
		healthy            bool
		retry              time.Duration
		wantWait, wantNext time.Duration
	}{
		{"healthy waits the interval and resets", true, 8 * time.Second, every, 0},
		{"first failure re-probes in a second", false, 0, time.Second, 2 * time.Second},
		{"failures double the delay", false, 4 * time.Second, 4 * time.Second, 8 * time.Second},
		{"the delay never passes the interval", false, 8 * time.Second, 8 * time.Second, every},
		{"a long outage probes at the interval", false, every, every, every},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait, next := nextProbe(tt.healthy, tt.retry, every)
			if wait != tt.wantWait || next != tt.wantNext {
				t.Errorf("nextProbe(%v, %s) = %s, %s; want %s, %s", tt.healthy, tt.retry, wait, next, tt.wantWait, tt.wantNext)
			}
		})
	}
	if wait, _ := nextProbe(false, 0, 300*time.Millisecond); wait != 300*time.Millisecond {
		t.Errorf("an interval shorter than the first re-probe: wait %s, want the interval", wait)
	}
}

// TestProbeLoopReprobesAfterFailure: with an hour between rounds, a cluster
// that rejected the first probe is probed again within seconds and seen
// healthy once it accepts — the controller starting before a spoke's webhook.
func TestProbeLoopReprobesAfterFailure(t *testing.T) {
	s := newFakeSpoke(t)
	s.set("tok", 401)
	cs := newClientsT(t, entryFor(t, "late-webhook", s, "tok"))
	c, _ := cs.Get("late-webhook")

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cs.ProbeLoop(ctx, time.Hour) }()
	defer func() {
		cancel()
		<-done
	}()

	deadline := time.Now().Add(30 * time.Second)
	for c.Health().CheckedAt.IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("no first probe within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c.Health().CredentialsValid {
		t.Fatal("first probe healthy, want the 401")
	}
	s.set("tok", 0) // the webhook is up now
	for !c.Health().CredentialsValid {
		if time.Now().After(deadline) {
			t.Fatalf("still unhealthy after 30s with an hour's interval: %+v", c.Health())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
