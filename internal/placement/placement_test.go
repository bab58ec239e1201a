package placement

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const gpu = "nvidia.com/gpu"

// Builders of one spoke as the caller reports it.
func fitting(name string, free, total int64) Candidate {
	return Candidate{Cluster: name, View: true, Fits: true, Resource: gpu, Free: free, Total: total}
}

func notFitting(name string, total int64, reason string) Candidate {
	return Candidate{Cluster: name, View: true, Resource: gpu, Total: total, Reason: reason}
}

func noView(name string) Candidate { return Candidate{Cluster: name} }

func queued(c Candidate, q int64) Candidate { c.Queued = q; return c }

func excluded(name, why string) Candidate { return Candidate{Cluster: name, Excluded: why} }

func reasons(pairs ...string) []Reason {
	var rs []Reason
	for i := 0; i < len(pairs); i += 2 {
		rs = append(rs, Reason{Cluster: pairs[i], Text: pairs[i+1]})
	}
	return rs
}

// Each rule of the package doc, with every spoke's reason asserted exactly.
func TestDecide(t *testing.T) {
	tests := []struct {
		name       string
		req        Request
		candidates []Candidate
		want       Decision
		wantErr    error
	}{
		{
			name:       "most free of the scarcest resource wins",
			candidates: []Candidate{fitting("wharf", 2, 4), fitting("dock", 16, 16), noView("pier")},
			want: Decision{Cluster: "dock", Reasons: reasons("wharf", "fits (2 nvidia.com/gpu free)",
				"dock", "fits (16 nvidia.com/gpu free)", "pier", "no capacity view")},
		},
		{
			name:       "a tie goes to profile order",
			candidates: []Candidate{fitting("wharf", 4, 4), fitting("dock", 4, 16)},
			want:       Decision{Cluster: "wharf", Reasons: reasons("wharf", "fits (4 nvidia.com/gpu free)", "dock", "fits (4 nvidia.com/gpu free)")},
		},
		{
			name: "views naming different resources are not compared: profile order",
			candidates: []Candidate{
				{Cluster: "wharf", View: true, Fits: true, Resource: "cpu", Free: 3500, Total: 8000},
				{Cluster: "dock", View: true, Fits: true, Resource: "memory", Free: 8 << 30, Total: 32 << 30},
			},
			want: Decision{Cluster: "wharf", Reasons: reasons("wharf", "fits (3500 cpu free)", "dock", "fits (8589934592 memory free)")},
		},
		{
			name: "a waiting pod joins the shortest queue for the capacity, not the biggest spoke",
			candidates: []Candidate{
				queued(notFitting("dock", 8, "0 of 8 nvidia.com/gpu free (needs 1)"), 6),
				queued(notFitting("pier", 8, "0 of 8 nvidia.com/gpu free (needs 1)"), 2),
				queued(notFitting("wharf", 4, "0 of 4 nvidia.com/gpu free (needs 1)"), 2),
			},
			want: Decision{Cluster: "pier", Waits: true, Reasons: reasons("dock", "0 of 8 nvidia.com/gpu free (needs 1)",
				"pier", "0 of 8 nvidia.com/gpu free (needs 1)", "wharf", "0 of 4 nvidia.com/gpu free (needs 1)")},
		},
		{
			name: "as short a queue for the capacity: the most total",
			candidates: []Candidate{
				queued(notFitting("wharf", 4, "full"), 2),
				queued(notFitting("dock", 8, "full"), 4),
			},
			want: Decision{Cluster: "dock", Waits: true, Reasons: reasons("wharf", "full", "dock", "full")},
		},
		{
			name: "nor are their totals where the pod waits",
			candidates: []Candidate{
				{Cluster: "wharf", View: true, Resource: "cpu", Total: 8000, Reason: "Insufficient cpu"},
				{Cluster: "dock", View: true, Resource: "memory", Total: 32 << 30, Reason: "Insufficient memory"},
			},
			want: Decision{Cluster: "wharf", Waits: true, Reasons: reasons("wharf", "Insufficient cpu", "dock", "Insufficient memory")},
		},
		{
			name:       "a view without a resource does not stop the others comparing",
			candidates: []Candidate{{Cluster: "pier", View: true, Fits: true}, fitting("wharf", 1, 4), fitting("dock", 16, 16)},
			want: Decision{Cluster: "dock", Reasons: reasons("pier", "fits", "wharf", "fits (1 nvidia.com/gpu free)",
				"dock", "fits (16 nvidia.com/gpu free)")},
		},
		{
			name:       "a spoke that fits comes before one without a view",
			candidates: []Candidate{noView("pier"), fitting("wharf", 1, 4)},
			want:       Decision{Cluster: "wharf", Reasons: reasons("pier", "no capacity view", "wharf", "fits (1 nvidia.com/gpu free)")},
		},
		{
			name:       "without a fit, the first spoke without a view in profile order",
			candidates: []Candidate{notFitting("wharf", 4, "1 of 4 nvidia.com/gpu free (needs 2)"), noView("pier"), noView("quay")},
			want:       Decision{Cluster: "pier", Reasons: reasons("wharf", "1 of 4 nvidia.com/gpu free (needs 2)", "pier", "no capacity view", "quay", "no capacity view")},
		},
		{
			name: "excluded and tried spokes are never chosen, whatever their view",
			req:  Request{Tried: []string{"dock"}},
			candidates: []Candidate{
				{Cluster: "wharf", Excluded: "unreachable", View: true, Fits: true, Resource: gpu, Free: 8, Total: 8},
				fitting("dock", 16, 16), fitting("pier", 1, 1),
			},
			want: Decision{Cluster: "pier", Reasons: reasons("wharf", "unreachable", "dock", "tried before", "pier", "fits (1 nvidia.com/gpu free)")},
		},
		{
			name:       "tried is the reason of a spoke also excluded now",
			req:        Request{Tried: []string{"wharf"}},
			candidates: []Candidate{excluded("wharf", "draining"), fitting("dock", 1, 1)},
			want:       Decision{Cluster: "dock", Reasons: reasons("wharf", "tried before", "dock", "fits (1 nvidia.com/gpu free)")},
		},
		{
			name: "nothing fits now: the pod waits where the most total would take it",
			candidates: []Candidate{
				notFitting("wharf", 4, "0 of 4 nvidia.com/gpu free (needs 1)"), notFitting("dock", 16, "0 of 16 nvidia.com/gpu free (needs 1)"),
				excluded("pier", "class gpu not offered"),
			},
			want: Decision{Cluster: "dock", Waits: true, Reasons: reasons("wharf", "0 of 4 nvidia.com/gpu free (needs 1)",
				"dock", "0 of 16 nvidia.com/gpu free (needs 1)", "pier", "class gpu not offered")},
		},
		{
			name:       "waiting: a tie goes to profile order, a spoke that never could is passed over",
			candidates: []Candidate{notFitting("pier", 0, "no node has nvidia.com/gpu"), notFitting("wharf", 8, ""), notFitting("dock", 8, "")},
			want:       Decision{Cluster: "wharf", Waits: true, Reasons: reasons("pier", "no node has nvidia.com/gpu", "wharf", "does not fit now", "dock", "does not fit now")},
		},
		{
			name:       "a tried spoke is no place to wait",
			req:        Request{Tried: []string{"dock"}},
			candidates: []Candidate{notFitting("wharf", 4, "full"), notFitting("dock", 16, "full")},
			want:       Decision{Cluster: "wharf", Waits: true, Reasons: reasons("wharf", "full", "dock", "tried before")},
		},
		{
			name:       "strict refuses to wait, with every spoke's reason",
			req:        Request{Strict: true},
			candidates: []Candidate{notFitting("wharf", 4, "1 of 4 nvidia.com/gpu free (needs 2)"), excluded("dock", "class gpu not offered"), excluded("pier", "unreachable")},
			wantErr: &NoFitError{Strict: true, Reasons: reasons("wharf", "1 of 4 nvidia.com/gpu free (needs 2)",
				"dock", "class gpu not offered", "pier", "unreachable")},
		},
		{
			name:       "strict still places where it fits",
			req:        Request{Strict: true},
			candidates: []Candidate{notFitting("wharf", 4, "full"), fitting("dock", 3, 16)},
			want:       Decision{Cluster: "dock", Reasons: reasons("wharf", "full", "dock", "fits (3 nvidia.com/gpu free)")},
		},
		{
			name:       "strict places on a spoke without a view: nothing says it does not fit",
			req:        Request{Strict: true},
			candidates: []Candidate{notFitting("wharf", 4, "full"), noView("pier")},
			want:       Decision{Cluster: "pier", Reasons: reasons("wharf", "full", "pier", "no capacity view")},
		},
		{
			name:       "no candidate at all",
			req:        Request{Tried: []string{"dock"}},
			candidates: []Candidate{excluded("wharf", "may not create pods"), fitting("dock", 8, 8), notFitting("pier", 0, "no node has nvidia.com/gpu")},
			wantErr: &NoFitError{Reasons: reasons("wharf", "may not create pods", "dock", "tried before",
				"pier", "no node has nvidia.com/gpu")},
		},
		{
			name:    "no spokes",
			wantErr: &NoFitError{},
		},
		{
			name:       "a preference list is taken in its order, not by score",
			req:        Request{Preference: []string{"wharf", "dock"}},
			candidates: []Candidate{fitting("dock", 16, 16), fitting("wharf", 1, 4), fitting("pier", 30, 30)},
			want: Decision{Cluster: "wharf", Reasons: reasons("dock", "fits (16 nvidia.com/gpu free)",
				"wharf", "fits (1 nvidia.com/gpu free)", "pier", "not in the preference list")},
		},
		{
			name:       "a listed spoke without a view keeps its place in the list",
			req:        Request{Preference: []string{"pier", "dock"}},
			candidates: []Candidate{fitting("dock", 16, 16), noView("pier")},
			want:       Decision{Cluster: "pier", Reasons: reasons("dock", "fits (16 nvidia.com/gpu free)", "pier", "no capacity view")},
		},
		{
			name:       "a listed spoke that does not fit is passed over",
			req:        Request{Preference: []string{"wharf", "dock"}},
			candidates: []Candidate{notFitting("wharf", 4, "full"), fitting("dock", 2, 16)},
			want:       Decision{Cluster: "dock", Reasons: reasons("wharf", "full", "dock", "fits (2 nvidia.com/gpu free)")},
		},
		{
			name:       "with a list, only listed spokes are chosen, even to wait",
			req:        Request{Preference: []string{"wharf"}},
			candidates: []Candidate{notFitting("wharf", 4, "full"), fitting("dock", 16, 16)},
			want:       Decision{Cluster: "wharf", Waits: true, Reasons: reasons("wharf", "full", "dock", "not in the preference list")},
		},
		{
			name:       "with a list, a wait tie goes to the list's order",
			req:        Request{Preference: []string{"dock", "wharf"}},
			candidates: []Candidate{notFitting("wharf", 8, "full"), notFitting("dock", 8, "full")},
			want:       Decision{Cluster: "dock", Waits: true, Reasons: reasons("wharf", "full", "dock", "full")},
		},
		{
			name:       "with a list, no listed candidate",
			req:        Request{Preference: []string{"wharf"}},
			candidates: []Candidate{excluded("wharf", "unreachable"), fitting("dock", 16, 16)},
			wantErr:    &NoFitError{Reasons: reasons("wharf", "unreachable", "dock", "not in the preference list")},
		},
		{
			name:       "a fitting spoke that names no resource",
			candidates: []Candidate{{Cluster: "wharf", View: true, Fits: true}},
			want:       Decision{Cluster: "wharf", Reasons: reasons("wharf", "fits")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decide(tt.req, tt.candidates)
			if diff := cmp.Diff(tt.wantErr, err, cmp.Comparer(sameNoFit)); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func sameNoFit(a, b error) bool {
	x, okx := errors.AsType[*NoFitError](a)
	y, oky := errors.AsType[*NoFitError](b)
	if !okx || !oky {
		return a == nil && b == nil
	}
	return cmp.Equal(x, y, cmpopts.EquateEmpty())
}

// Candidates built wrong and a list naming a cluster not among them are
// errors naming the culprit, not a 409.
func TestDecideRefusesBadInput(t *testing.T) {
	tests := []struct {
		name       string
		req        Request
		candidates []Candidate
		want       string
		unknown    bool
	}{
		{name: "preference names a missing cluster", req: Request{Preference: []string{"wharf", "nope"}},
			candidates: []Candidate{fitting("wharf", 1, 1)}, want: `clusters: "nope": not a candidate cluster`, unknown: true},
		{name: "empty cluster", candidates: []Candidate{fitting("wharf", 1, 1), {}}, want: "candidate 1: empty cluster name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decide(tt.req, tt.candidates)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Decide = %+v, %v; want error %q", got, err, tt.want)
			}
			if errors.Is(err, ErrUnknownCluster) != tt.unknown {
				t.Errorf("errors.Is(%v, ErrUnknownCluster) = %v, want %v", err, !tt.unknown, tt.unknown)
			}
		})
	}
}

// The one-line forms: the decision as the row keeps it, and the 409's
// message.
func TestStrings(t *testing.T) {
	rs := reasons("wharf", "1 of 4 nvidia.com/gpu free (needs 2)", "dock", "class gpu not offered", "pier", "unreachable")
	want := "wharf: 1 of 4 nvidia.com/gpu free (needs 2); dock: class gpu not offered; pier: unreachable"
	if got := (Decision{Cluster: "wharf", Waits: true, Reasons: rs}).String(); got != want {
		t.Errorf("Decision.String() = %q, want %q", got, want)
	}
	for _, tt := range []struct {
		err  *NoFitError
		want string
	}{
		{&NoFitError{Strict: true, Reasons: rs}, "no cluster fits the pod now (placement strict): " + want},
		{&NoFitError{Reasons: rs}, "no cluster can take the pod: " + want},
		{&NoFitError{}, "no cluster can take the pod: no clusters"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// FuzzDecide: whatever the spokes, Decide is deterministic, never chooses
// an excluded, tried or unlisted spoke, never waits under Strict, waits
// only where the view says no fit now but some room if empty, keeps every
// spoke's reason in profile order, and refuses only with a *NoFitError or
// ErrUnknownCluster.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{0x13, 4, 4, 0x03, 16, 16, 0x00, 0, 0}, []byte{}, []byte{}, false)
	f.Add([]byte{0x03, 0, 4, 0x03, 0, 16}, []byte{1, 0}, []byte{}, true)
	f.Add([]byte{0x07, 2, 4, 0x01, 0, 8, 0x02, 0, 0}, []byte{2}, []byte{0, 1}, false)
	f.Add([]byte{0x03, 0, 0}, []byte{9}, []byte{}, true)
	f.Fuzz(func(t *testing.T, spokes, pref, tried []byte, strict bool) {
		candidates := fuzzCandidates(spokes)
		req := Request{Preference: names(pref), Tried: names(tried), Strict: strict}
		d, err := Decide(req, candidates)
		again, errAgain := Decide(req, candidates)
		if diff := cmp.Diff(d, again); diff != "" || fmt.Sprint(err) != fmt.Sprint(errAgain) {
			t.Fatalf("not deterministic (-first +second):\n%s\n%v / %v", diff, err, errAgain)
		}
		_ = d.String()
		if err != nil {
			checkRefusal(t, err, candidates)
			return
		}
		checkDecision(t, req, candidates, d)
	})
}

func checkRefusal(t *testing.T, err error, candidates []Candidate) {
	t.Helper()
	if errors.Is(err, ErrUnknownCluster) {
		return
	}
	nf, ok := errors.AsType[*NoFitError](err)
	if !ok {
		t.Fatalf("refused with %T %v", err, err)
	}
	_ = nf.Error()
	if len(nf.Reasons) != len(candidates) {
		t.Fatalf("%d reasons for %d spokes", len(nf.Reasons), len(candidates))
	}
}

func checkDecision(t *testing.T, req Request, candidates []Candidate, d Decision) {
	t.Helper()
	i := indexOf(candidates, d.Cluster)
	if i < 0 {
		t.Fatalf("chose %q, not a spoke", d.Cluster)
	}
	c := candidates[i]
	switch {
	case c.Excluded != "":
		t.Fatalf("chose excluded %q", c.Cluster)
	case slices.Contains(req.Tried, c.Cluster):
		t.Fatalf("chose tried %q", c.Cluster)
	case len(req.Preference) > 0 && !slices.Contains(req.Preference, c.Cluster):
		t.Fatalf("chose %q, not in %v", c.Cluster, req.Preference)
	case req.Strict && d.Waits:
		t.Fatal("strict, yet waits")
	case d.Waits && (!c.View || c.Fits || c.Total <= 0):
		t.Fatalf("waits on %+v", c)
	case !d.Waits && c.View && !c.Fits:
		t.Fatalf("placed without waiting where it does not fit: %+v", c)
	}
	for j, r := range d.Reasons {
		if r.Cluster != candidates[j].Cluster || r.Text == "" {
			t.Fatalf("reason %d is %+v for spoke %q", j, r, candidates[j].Cluster)
		}
	}
	if len(d.Reasons) != len(candidates) {
		t.Fatalf("%d reasons for %d spokes", len(d.Reasons), len(candidates))
	}
}

// fuzzCandidates reads three bytes a spoke: flags (view, fits, excluded,
// names a resource), free, total. Spoke i is "c<i>".
func fuzzCandidates(data []byte) []Candidate {
	var cs []Candidate
	for i := 0; i+3 <= len(data) && len(cs) < 200; i += 3 {
		flags := data[i]
		c := Candidate{Cluster: fmt.Sprintf("c%d", len(cs)), View: flags&1 != 0, Fits: flags&2 != 0,
			Free: int64(data[i+1]), Total: int64(int8(data[i+2]))}
		if flags&4 != 0 {
			c.Excluded = "unreachable"
		}
		if flags&8 != 0 {
			c.Resource = gpu
		}
		if flags&16 != 0 {
			c.Reason = "0 of 4 nvidia.com/gpu free (needs 1)"
		}
		cs = append(cs, c)
	}
	return cs
}

// names reads each byte as spoke index: "c<b%16>", so lists name missing
// spokes and repeat some.
func names(data []byte) []string {
	var ns []string
	for _, b := range data {
		ns = append(ns, fmt.Sprintf("c%d", b%16))
	}
	return ns
}

// BenchmarkDecide100Spokes: one auto placement over a fleet of 100 spokes,
// a third excluded, a third full, the rest fitting or without a view.
func BenchmarkDecide100Spokes(b *testing.B) {
	candidates := make([]Candidate, 100)
	for i := range candidates {
		name := fmt.Sprintf("spoke-%03d", i)
		switch i % 6 {
		case 0, 1:
			candidates[i] = excluded(name, "class gpu not offered")
		case 2, 3:
			candidates[i] = notFitting(name, int64(8+i), "0 of 8 nvidia.com/gpu free (needs 1)")
		case 4:
			candidates[i] = fitting(name, int64(i%9), 64)
		default:
			candidates[i] = noView(name)
		}
	}
	req := Request{Tried: []string{"spoke-004", "spoke-010"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decide(req, candidates); err != nil {
			b.Fatal(err)
		}
	}
}
