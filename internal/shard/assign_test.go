package shard_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"crucible.dev/crucible/internal/shard"
)

// Three replicas split ten spokes 3–4 each; a fourth that joins gets two
// or three and nobody keeps more than three; one that stops hands its
// spokes to the others at higher epochs and deletes its member Lease. At
// no moment do two runs of one spoke overlap (runs checks it throughout).
func TestSpread(t *testing.T) {
	e := newEnv(t, "shard-spread", spokeNames(10))
	r1, r2, r3 := e.start("host-a"), e.start("host-b"), e.start("host-c")
	waitFor(t, "three replicas share ten spokes", e.balanced(3, 4, r1, r2, r3))

	r4 := e.start("host-d")
	waitFor(t, "a fourth replica takes its share", e.balanced(2, 3, r1, r2, r3, r4))

	moved := r2.a.Owned()
	before := e.epochs(moved)
	r2.halt(t)
	if got := r2.a.Owned(); len(got) != 0 {
		t.Errorf("a stopped replica owns %v", got)
	}
	for _, s := range moved {
		if holder, _ := e.lease(s); holder == r2.id {
			t.Errorf("%s still held by the stopped replica: Run returned before releasing it", s)
		}
	}
	members, err := e.hub.Client.CoordinationV1().Leases(e.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range members.Items {
		if strings.Contains(l.Name, "-member-") && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == r2.id {
			t.Errorf("member Lease %s of the stopped replica left behind", l.Name)
		}
	}
	waitFor(t, "the stopped replica's spokes go to the others", e.balanced(3, 4, r1, r3, r4))
	e.wantHigher(before, r1, r3, r4)
}

// A replica cut off from the hub (as one SIGSTOPped, or partitioned) stops
// its runs before its leases run out in the others' eyes — runs fails the
// test if another replica starts one of its spokes while its run is still
// going — and the others take its spokes at higher epochs. Back on the
// hub, it writes nothing under its old epochs and gets a share again.
func TestCutOff(t *testing.T) {
	e := newEnv(t, "shard-cutoff", spokeNames(10))
	r1, r2, r3 := e.start("host-a"), e.start("host-b"), e.start("host-c")
	waitFor(t, "three replicas share ten spokes", e.balanced(3, 4, r1, r2, r3))

	lost := r1.a.Owned()
	before := e.epochs(lost)
	r1.gate.shut()
	waitFor(t, "the cut-off replica stops acting", func() (bool, string) {
		owned := r1.a.Owned()
		return len(owned) == 0, "it still owns " + strings.Join(owned, ",")
	})
	waitFor(t, "the others take its spokes", e.balanced(5, 5, r2, r3))
	e.wantHigher(before, r2, r3)

	r1.gate.reopen()
	waitFor(t, "back on the hub it gets a share again", e.balanced(3, 4, r1, r2, r3))
	_, epochs := e.runs.snapshot()
	for s, old := range before {
		if epochs[s] <= old {
			t.Errorf("%s last run at epoch %d, want above its epoch %d before the cut", s, epochs[s], old)
		}
	}
}

// A spoke gone from spokes() has its run stopped and its Lease released
// (holder cleared, epoch kept); back in the fleet, it runs again at a
// higher epoch.
func TestFleetChanges(t *testing.T) {
	e := newEnv(t, "shard-fleet", spokeNames(4))
	r1, r2 := e.start("host-a"), e.start("host-b")
	waitFor(t, "two replicas share four spokes", e.balanced(2, 2, r1, r2))

	gone := "spoke-01"
	_, old := e.lease(gone)
	e.fleet.set([]string{"spoke-00", "spoke-02", "spoke-03"})
	waitFor(t, "the spoke's run stops and its Lease is released", func() (bool, string) {
		running, _ := e.runs.snapshot()
		if who, ok := running[gone]; ok {
			return false, "still run by " + who
		}
		holder, epoch := e.lease(gone)
		if holder != "" || epoch != old {
			return false, "Lease held by " + holder
		}
		for _, r := range []*replica{r1, r2} {
			if _, ok := r.a.Owners()[gone]; ok {
				return false, "still in Owners of " + r.id
			}
		}
		return true, ""
	})
	waitFor(t, "the rest stays shared", e.balanced(1, 2, r1, r2))

	e.fleet.set(spokeNames(4))
	waitFor(t, "back in the fleet, the spoke runs again", e.balanced(2, 2, r1, r2))
	if _, now := e.lease(gone); now != old+1 {
		t.Errorf("%s at epoch %d after its return, want %d", gone, now, old+1)
	}
}

func TestNewChecksOptions(t *testing.T) {
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: "https://hub.invalid"}) // never called
	if err != nil {
		t.Fatal(err)
	}
	valid := func() shard.Options {
		return shard.Options{Kube: kube, Namespace: "crucible", Prefix: "crucible", Identity: "host_1",
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, Log: slog.Default()}
	}
	tests := []struct {
		name   string
		change func(*shard.Options)
		want   []string // how each line of the error starts
	}{
		{"valid", func(*shard.Options) {}, nil},
		{"all missing", func(o *shard.Options) { *o = shard.Options{} }, []string{
			"Kube: required", "Namespace: required", "Prefix: required", "Identity: required",
			"LeaseDuration 0s: must be at least 1s",
			"RenewDeadline 0s: must be positive and less than LeaseDuration 0s",
			"RetryPeriod 0s: must be positive and less than RenewDeadline 0s", "Log: required"}},
		{"names not DNS labels", func(o *shard.Options) { o.Namespace, o.Prefix = "Crucible", "a.b" }, []string{
			`Namespace "Crucible": a lowercase RFC 1123 label must consist of lower case alphanumeric characters`,
			`Prefix "a.b": must not contain dots`}},
		{"lease not whole seconds", func(o *shard.Options) {
			o.LeaseDuration = 2500 * time.Millisecond
			o.RenewDeadline = 2 * time.Second
			o.RetryPeriod = time.Second
		}, []string{
			"LeaseDuration 2.5s: must be whole seconds (the Lease records seconds)"}},
		{"renew deadline not below the lease", func(o *shard.Options) { o.RenewDeadline = 15 * time.Second }, []string{
			"RenewDeadline 15s: must be positive and less than LeaseDuration 15s"}},
		{"retry period not below the renew deadline", func(o *shard.Options) { o.RetryPeriod = 10 * time.Second }, []string{
			"RetryPeriod 10s: must be positive and less than RenewDeadline 10s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid()
			tt.change(&o)
			a, err := shard.New(o)
			if tt.want == nil {
				if err != nil || a == nil {
					t.Fatalf("New = %v, %v; want an Assigner", a, err)
				}
				return
			}
			if err == nil {
				t.Fatal("New accepted the options")
			}
			got, ok := strings.CutPrefix(err.Error(), "shard options: ")
			lines := strings.Split(got, "\n")
			match := ok && len(lines) == len(tt.want)
			for i := 0; match && i < len(lines); i++ {
				match = strings.HasPrefix(lines[i], tt.want[i])
			}
			if !match {
				t.Errorf("New error:\n%s\nwant lines starting:\n%s", err, strings.Join(tt.want, "\n"))
			}
		})
	}
}

// Run refuses to run twice at once: two loops of one Assigner would hold
// the same leases under one identity.
func TestRunOnce(t *testing.T) {
	e := newEnv(t, "shard-once", spokeNames(1))
	r := e.start("host-a")
	waitFor(t, "the replica owns the spoke", e.balanced(1, 1, r))
	err := r.a.Run(t.Context(), e.fleet.get, e.runs.run("second"))
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run = %v, want already running", err)
	}
}

// TestHundredSpokes: three replicas share a hundred spokes 33–34 each;
// one cut off from the hub has all its spokes owned again by the others
// once its leases have run out, each at a higher epoch.
func TestHundredSpokes(t *testing.T) {
	e := newEnv(t, "shard-hundred", spokeNames(100))
	r1, r2, r3 := e.start("host-a"), e.start("host-b"), e.start("host-c")
	waitFor(t, "three replicas share a hundred spokes", e.balanced(33, 34, r1, r2, r3))

	lost := r1.a.Owned()
	before := e.epochs(lost)
	cut := time.Now()
	r1.gate.shut()
	waitFor(t, "the others take its spokes", e.balanced(50, 50, r2, r3))
	t.Logf("%d spokes owned again %s after their replica was cut off (lease duration %s)", len(lost), time.Since(cut).Round(10*time.Millisecond), leaseDuration)
	e.wantHigher(before, r2, r3)
}
