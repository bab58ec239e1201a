package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/store"
)

// write is one of the fenced writes of a row's cluster, each a change
// that passes on a live row: n makes every call's change its own.
type write struct {
	name string
	do   func(ctx context.Context, s store.Store, id string, n int) error
}

var writes = []write{
	{"CreateWorkPod", func(ctx context.Context, s store.Store, id string, n int) error {
		_, err := s.CreateWorkPod(ctx, pod(fmt.Sprintf("%s-new-%d", id, n), func(p *store.WorkPod) { p.Cluster = clusterOf(id) }))
		return err
	}},
	{"UpdateWorkPod", func(ctx context.Context, s store.Store, id string, n int) error {
		_, err := s.UpdateWorkPod(ctx, id, func(p *store.WorkPod) error { p.Reason += fmt.Sprintf("u%d;", n); return nil })
		return err
	}},
	{"TransitionWorkPod", func(ctx context.Context, s store.Store, id string, n int) error {
		_, err := s.TransitionWorkPod(ctx, id, store.Transition{From: store.LiveStates, PodUID: fmt.Sprintf("uid-%d", n)})
		return err
	}},
	{"ObservePod", func(ctx context.Context, s store.Store, id string, n int) error {
		_, changed, err := s.ObservePod(ctx, id, store.Observation{Waiting: waiting(fmt.Sprintf("Reason%d", n), "")})
		if err == nil && !changed {
			err = errors.New("observation changed nothing")
		}
		return err
	}},
	{"PutArtifact", func(ctx context.Context, s store.Store, id string, n int) error {
		_, err := s.PutArtifact(ctx, art(id, fmt.Sprintf("k%d", n), 1, fmt.Sprintf("%s-%d", id, n)), noQuota)
		return err
	}},
}

// clusterOf is the cluster of the fence tests' rows: their id's prefix
// before the first '-' ("wharf-a" is wharf's).
func clusterOf(id string) string { c, _, _ := strings.Cut(id, "-"); return c }

// snapshot is everything a write of rows could change, read back.
type snapshot struct {
	Pods      []store.WorkPod
	Artifacts map[string][]store.Artifact
	History   map[string][]store.HistoryEntry
}

func snap(t *testing.T, s store.Store) snapshot {
	t.Helper()
	pods, err := s.ListWorkPods(t.Context(), store.Filter{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	sn := snapshot{Pods: pods, Artifacts: map[string][]store.Artifact{}, History: map[string][]store.HistoryEntry{}}
	for _, p := range pods {
		if sn.Artifacts[p.ID], err = s.ListArtifacts(t.Context(), p.ID); err != nil {
			t.Fatalf("artifacts of %s: %v", p.ID, err)
		}
		sn.History[p.ID] = history(t, s, p.ID)
	}
	return sn
}

// mustWrite makes every write of id's row with ctx, and fails on any error.
func mustWrite(t *testing.T, ctx context.Context, s store.Store, id string, n int) {
	t.Helper()
	for _, w := range writes {
		if err := w.do(ctx, s, id, n); err != nil {
			t.Fatalf("%s of %s (write %d): %v", w.name, id, n, err)
		}
	}
}

// mustRefuse makes every write of id's row with ctx, each of which must be
// ErrFenced and none of which may change anything.
func mustRefuse(t *testing.T, ctx context.Context, s store.Store, id string, n int) {
	t.Helper()
	before := snap(t, s)
	for _, w := range writes {
		if err := w.do(ctx, s, id, n); !errors.Is(err, store.ErrFenced) {
			t.Errorf("%s of %s: %v, want ErrFenced", w.name, id, err)
		}
	}
	called := false
	if _, err := s.UpdateWorkPod(ctx, id, func(*store.WorkPod) error { called = true; return nil }); called || !errors.Is(err, store.ErrFenced) {
		t.Errorf("refused update of %s: fn called %v, %v; want it not called, ErrFenced", id, called, err)
	}
	if diff := cmp.Diff(before, snap(t, s)); diff != "" {
		t.Errorf("refused writes of %s changed the store (-before +after):\n%s", id, diff)
	}
}

// testFenceNewer: a write of a newer epoch fences every write of an older
// one off, and the newer owner goes on writing; the refusal names both
// epochs.
func testFenceNewer(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("wharf-a"))
	old, newer := store.WithFence(t.Context(), "wharf", 3), store.WithFence(t.Context(), "wharf", 4)
	mustWrite(t, old, s, "wharf-a", 1)
	mustWrite(t, old, s, "wharf-a", 2) // the same epoch again
	if _, err := s.UpdateWorkPod(newer, "wharf-a", func(p *store.WorkPod) error { p.Reason = "newer;"; return nil }); err != nil {
		t.Fatalf("update of the newer epoch: %v", err)
	}
	mustRefuse(t, old, s, "wharf-a", 3)
	mustWrite(t, newer, s, "wharf-a", 4)

	_, err := s.TransitionWorkPod(old, "wharf-a", store.Transition{Reason: "late"})
	if msg := fmt.Sprint(err); !strings.Contains(msg, "cluster wharf") || !strings.Contains(msg, "epoch 3") || !strings.Contains(msg, "epoch 4") {
		t.Errorf("refusal %q does not name the cluster and both epochs", msg)
	}
	if got := mustGet(t, s, "wharf-a"); got.Reason != "newer;u4;" || got.PodUID != "uid-4" {
		t.Errorf("row after the newer owner's writes: reason %q, uid %q; want %q, %q", got.Reason, got.PodUID, "newer;u4;", "uid-4")
	}
}

// testFenceClaim: ClaimEpoch alone fences older epochs off, before the
// newer owner wrote anything; claims only grow.
func testFenceClaim(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("wharf-a"))
	ctx := t.Context()
	mustWrite(t, store.WithFence(ctx, "wharf", 1), s, "wharf-a", 1)
	if err := s.ClaimEpoch(ctx, "wharf", 2); err != nil {
		t.Fatalf("claim 2: %v", err)
	}
	mustRefuse(t, store.WithFence(ctx, "wharf", 1), s, "wharf-a", 2)
	for _, c := range []struct {
		epoch int64
		want  error
	}{{2, nil}, {1, store.ErrFenced}, {0, store.ErrFenced}, {7, nil}, {2, store.ErrFenced}, {7, nil}} {
		if err := s.ClaimEpoch(ctx, "wharf", c.epoch); !errors.Is(err, c.want) {
			t.Errorf("claim %d: %v, want %v", c.epoch, err, c.want)
		}
	}
	mustRefuse(t, store.WithFence(ctx, "wharf", 2), s, "wharf-a", 3)
	mustWrite(t, store.WithFence(ctx, "wharf", 7), s, "wharf-a", 4)
}

// testFenceScope: epochs are per cluster, unfenced writes always pass, and
// a fence never writes another cluster's rows.
func testFenceScope(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("wharf-a"), pod("dock-a", func(p *store.WorkPod) { p.Cluster = "dock" }))
	ctx := t.Context()
	if err := s.ClaimEpoch(ctx, "wharf", 5); err != nil {
		t.Fatalf("claim: %v", err)
	}
	mustWrite(t, store.WithFence(ctx, "dock", 1), s, "dock-a", 1)
	mustWrite(t, ctx, s, "wharf-a", 2)
	mustWrite(t, ctx, s, "dock-a", 3)

	mustRefuse(t, store.WithFence(ctx, "dock", 1), s, "wharf-a", 4)
	mustRefuse(t, store.WithFence(ctx, "wharf", 5), s, "dock-a", 5)
	mustWrite(t, store.WithFence(ctx, "wharf", 5), s, "wharf-a", 6)
}

// testFenceInvalid: a fence without a cluster or with a negative epoch is
// refused before anything is written, and is no ErrFenced (no owner did
// this); a fenced write that fails for another reason has still claimed
// its epoch.
func testFenceInvalid(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("wharf-a"))
	ctx := t.Context()
	before := snap(t, s)
	for _, f := range []store.Fence{{Cluster: "", Epoch: 1}, {Cluster: "wharf", Epoch: -1}} {
		fenced := store.WithFence(ctx, f.Cluster, f.Epoch)
		for _, w := range writes {
			if err := w.do(fenced, s, "wharf-a", 1); err == nil || errors.Is(err, store.ErrFenced) {
				t.Errorf("%s under %+v: %v, want a validation error", w.name, f, err)
			}
		}
		if err := s.ClaimEpoch(ctx, f.Cluster, f.Epoch); err == nil || errors.Is(err, store.ErrFenced) {
			t.Errorf("claim %+v: %v, want a validation error", f, err)
		}
	}
	if diff := cmp.Diff(before, snap(t, s)); diff != "" {
		t.Errorf("invalid fences changed the store (-before +after):\n%s", diff)
	}

	for epoch, fail := range []func(ctx context.Context) error{
		func(ctx context.Context) error {
			_, err := s.TransitionWorkPod(ctx, "wharf-a", store.Transition{From: []store.State{store.StateRunning}, To: store.StateSucceeded})
			return wantErr(err, store.ErrConflict)
		},
		func(ctx context.Context) error {
			_, err := s.UpdateWorkPod(ctx, "wharf-a", func(*store.WorkPod) error { return errBoom })
			return wantErr(err, errBoom)
		},
		func(ctx context.Context) error {
			_, err := s.PutArtifact(ctx, art("ghost", "log", 1, "x"), noQuota)
			return wantErr(err, store.ErrNotFound)
		},
	} {
		if err := fail(store.WithFence(ctx, "wharf", int64(epoch+1))); err != nil {
			t.Fatalf("failing write of epoch %d: %v", epoch+1, err)
		}
		mustRefuse(t, store.WithFence(ctx, "wharf", int64(epoch)), s, "wharf-a", 2)
	}
}

func wantErr(err, want error) error {
	switch {
	case err == nil:
		return fmt.Errorf("no error, want %w", want)
	case !errors.Is(err, want):
		return fmt.Errorf("%w, want %w", err, want)
	}
	return nil
}

// testFenceConcurrent: the old owner (epoch 1) writes as fast as it can
// from a few workers; once it has written a few times the new owner
// (epoch 2) starts writing too, from as many. Every write of the old owner
// after the new one's first must be refused: the row's log of appends (the
// old owner counts its own that passed) is those of epoch 1, then all of
// epoch 2's, and its uid is one epoch 2 set. On PostgreSQL every worker
// runs on a connection of its own, as the workers of two replicas do.
func testFenceConcurrent(t *testing.T, s store.Store) {
	const workers, head, newCount = 3, 10, 20
	mustCreate(t, s, pod("wharf-a"))
	ctx := t.Context()
	var (
		oldWrites, newWrites atomic.Int64
		started              = make(chan struct{})
		once                 sync.Once
		finished             = make(chan struct{}) // the new owner's writes are done
		oldDone              = make(chan error, workers)
		newDone              = make(chan error, workers)
	)
	start := func() { once.Do(func() { close(started) }) }
	for range workers {
		go func() {
			oldDone <- oldOwner(store.WithFence(ctx, "wharf", 1), s, &oldWrites, head, start, finished)
		}()
	}
	select {
	case <-started:
	case err := <-oldDone:
		t.Fatalf("old owner: %v", err)
	}
	for w := range workers {
		go func() {
			for i := range newCount {
				if err := ownerWrite(store.WithFence(ctx, "wharf", 2), s, 2, w*newCount+i, &newWrites); err != nil {
					newDone <- fmt.Errorf("write %d: %w", i, err)
					return
				}
			}
			newDone <- nil
		}()
	}
	for range workers {
		if err := <-newDone; err != nil {
			t.Errorf("new owner: %v", err)
		}
	}
	close(finished)
	for range workers {
		if err := <-oldDone; err != nil {
			t.Errorf("old owner: %v", err)
		}
	}
	got := mustGet(t, s, "wharf-a")
	n := int(oldWrites.Load())
	want := strings.Repeat("1;", n) + strings.Repeat("2;", workers*newCount)
	if got.Reason != want {
		t.Errorf("appends %q, want the %d of epoch 1 then the %d of epoch 2: an old write landed after a new one", got.Reason, n, workers*newCount)
	}
	if !strings.HasPrefix(got.PodUID, "2-") {
		t.Errorf("uid %q, want one the new owner set", got.PodUID)
	}
}

// oldOwner writes as epoch 1 until it is fenced off, calling start after
// head writes and counting in appended the appends that passed. A write
// begun after the new owner finished must be refused; once refused, each
// of its writes must be refused again.
func oldOwner(ctx context.Context, s store.Store, appended *atomic.Int64, head int, start func(), finished <-chan struct{}) error {
	for i := 0; ; i++ {
		if i == head {
			start()
		}
		late := isClosed(finished)
		err := ownerWrite(ctx, s, 1, i, appended)
		if errors.Is(err, store.ErrFenced) {
			break
		}
		if err != nil {
			return err
		}
		if late {
			return errors.New("a write of epoch 1 passed after epoch 2's last")
		}
	}
	for i := range 3 {
		if err := wantErr(ownerWrite(ctx, s, 1, -i, appended), store.ErrFenced); err != nil {
			return fmt.Errorf("a write after the first refusal: %w", err)
		}
	}
	return nil
}

// ownerWrite is write i of the owner of epoch: an append to the row's
// reason (counted in appended when it passed), then a transition setting
// its uid.
func ownerWrite(ctx context.Context, s store.Store, epoch, i int, appended *atomic.Int64) error {
	if _, err := s.UpdateWorkPod(ctx, "wharf-a", func(p *store.WorkPod) error { p.Reason += fmt.Sprintf("%d;", epoch); return nil }); err != nil {
		return err
	}
	appended.Add(1)
	_, err := s.TransitionWorkPod(ctx, "wharf-a", store.Transition{From: store.LiveStates, PodUID: fmt.Sprintf("%d-%d", epoch, i)})
	return err
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
