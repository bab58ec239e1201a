package storetest

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

// faultyCalls calls each Store method that Faulty can fail, with arguments
// a healthy store (seeded by seedFaulty) answers without error.
func faultyCalls() map[string]func(context.Context, store.Store) error {
	created := 0
	return map[string]func(context.Context, store.Store) error{
		"CreateWorkPod": func(ctx context.Context, s store.Store) error {
			created++
			_, err := s.CreateWorkPod(ctx, pod("new-"+strconv.Itoa(created)))
			return err
		},
		"GetWorkPodByKey": func(ctx context.Context, s store.Store) error {
			_, err := s.GetWorkPodByKey(ctx, "alice", "k")
			return err
		},
		"GetWorkPod": func(ctx context.Context, s store.Store) error { _, err := s.GetWorkPod(ctx, "p"); return err },
		"GetWorkPods": func(ctx context.Context, s store.Store) error {
			_, err := s.GetWorkPods(ctx, []string{"p"})
			return err
		},
		"ListWorkPods": func(ctx context.Context, s store.Store) error {
			_, err := s.ListWorkPods(ctx, store.Filter{})
			return err
		},
		"UpdateWorkPod": func(ctx context.Context, s store.Store) error {
			_, err := s.UpdateWorkPod(ctx, "p", func(p *store.WorkPod) error { p.Reason = "updated"; return nil })
			return err
		},
		"TransitionWorkPod": func(ctx context.Context, s store.Store) error {
			_, err := s.TransitionWorkPod(ctx, "p", store.Transition{From: store.LiveStates, To: store.StateRunning})
			return err
		},
		"PutArtifact": func(ctx context.Context, s store.Store) error {
			_, err := s.PutArtifact(ctx, art("p", "log", 1, "log"), noQuota)
			return err
		},
		"CountLive":     func(ctx context.Context, s store.Store) error { _, err := s.CountLive(ctx); return err },
		"ArtifactBytes": func(ctx context.Context, s store.Store) error { _, err := s.ArtifactBytes(ctx); return err },
		"BudgetBytes": func(ctx context.Context, s store.Store) error {
			_, _, err := s.BudgetBytes(ctx, "p", store.BudgetSubmitter)
			return err
		},
		"GetArtifact":   func(ctx context.Context, s store.Store) error { _, err := s.GetArtifact(ctx, "p", "log"); return err },
		"ListArtifacts": func(ctx context.Context, s store.Store) error { _, err := s.ListArtifacts(ctx, "p"); return err },
		"ObservePod": func(ctx context.Context, s store.Store) error {
			_, _, err := s.ObservePod(ctx, "p", store.Observation{Node: "n", Moments: []store.Event{store.EventScheduled}})
			return err
		},
		"MoveWorkPod": func(ctx context.Context, s store.Store) error {
			_, err := s.MoveWorkPod(ctx, "placed", moveToDock("wharf", ""))
			return err
		},
		"KeepMirrorDocument": func(ctx context.Context, s store.Store) error {
			return s.KeepMirrorDocument(ctx, "jwks", []byte(`{"keys":[{"kid":"b"}]}`), time.Now())
		},
		"MirrorDocument": func(ctx context.Context, s store.Store) error {
			_, _, err := s.MirrorDocument(ctx, "discovery")
			return err
		},
		"PodHistory": func(ctx context.Context, s store.Store) error { _, err := s.PodHistory(ctx, "p"); return err },
		"ClaimEpoch": func(ctx context.Context, s store.Store) error { return s.ClaimEpoch(ctx, "wharf", 1) },
		"DigestKey":  func(ctx context.Context, s store.Store) error { _, err := s.DigestKey(ctx); return err },
	}
}

func seedFaulty(t *testing.T, s store.Store) {
	t.Helper()
	mustCreate(t, s, pod("p", keyed("alice", "k", sha("request"))),
		pod("placed", func(p *store.WorkPod) { p.Placement = &store.Placement{Decision: "wharf: fits"} }))
	if err := s.KeepMirrorDocument(t.Context(), "discovery", []byte(`{"issuer":"x"}`), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutArtifact(t.Context(), art("p", "log", 1, "log"), noQuota); err != nil {
		t.Fatal(err)
	}
}

// Faulty can fail every Store call but Close: a method added to Store is
// added to Faulty too, or it would reach the store while a test believes
// the store down.
func TestFaultyCoversTheStore(t *testing.T) {
	typ := reflect.TypeFor[store.Store]()
	var methods []string
	for i := range typ.NumMethod() {
		if name := typ.Method(i).Name; name != "Close" {
			methods = append(methods, name)
		}
	}
	if diff := cmp.Diff(methods, slices.Sorted(slices.Values(calls))); diff != "" {
		t.Errorf("Faulty's calls (-Store's methods +calls):\n%s", diff)
	}
	if diff := cmp.Diff(methods, slices.Sorted(maps.Keys(faultyCalls()))); diff != "" {
		t.Errorf("calls this test makes (-Store's methods +tested):\n%s", diff)
	}
}

func TestFaulty(t *testing.T) {
	boom := errors.New("database down")
	tests := []struct {
		name  string
		fail  func(*Faulty)
		fails []string // the calls that must return boom; every other reaches the store
	}{
		{"nothing failed", func(*Faulty) {}, nil},
		{"every call", func(f *Faulty) { f.Fail(boom) }, calls},
		{"chosen calls", func(f *Faulty) { f.Fail(boom, "GetWorkPod", "PutArtifact") }, []string{"GetWorkPod", "PutArtifact"}},
		{"healed", func(f *Faulty) { f.Fail(boom); f.Fail(nil) }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &Faulty{Store: SQLite(t)}
			seedFaulty(t, f)
			tc.fail(f)
			for name, call := range faultyCalls() {
				err := call(t.Context(), f)
				if want := slices.Contains(tc.fails, name); errors.Is(err, boom) != want || !want && err != nil {
					t.Errorf("%s: %v, want the fault %v", name, err, want)
				}
			}
		})
	}
}

// A failed call does not reach the store: a create that failed wrote nothing.
func TestFaultyFailedCallWritesNothing(t *testing.T) {
	f := &Faulty{Store: SQLite(t)}
	f.Fail(errors.New("database down"), "CreateWorkPod")
	if _, err := f.CreateWorkPod(t.Context(), pod("x")); err == nil {
		t.Fatal("create succeeded on a failed store")
	}
	if _, err := f.GetWorkPod(t.Context(), "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get after the failed create: %v, want ErrNotFound", err)
	}
}

// Close reaches the store even when every call fails, so cleanup closes it.
func TestFaultyCloses(t *testing.T) {
	s := SQLite(t)
	f := &Faulty{Store: s}
	f.Fail(errors.New("database down"))
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := s.GetWorkPod(t.Context(), "p"); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Errorf("the store answers after Close: %v", err)
	}
}

func TestFaultyUnknownCallPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Fail of a call that is no Store method did not panic")
		}
	}()
	(&Faulty{}).Fail(errors.New("x"), "GetWorkpod")
}
