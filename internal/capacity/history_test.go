package capacity

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/kubernetes"

	"crucible.dev/crucible/internal/devstack/devstacktest"
)

var t0 = time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC)

// synced is a summary of the given GPUs per product, as Summary reports them.
func synced(gpus ...GPUs) Summary { return Summary{Synced: true, GPUs: gpus} }

// at is sample i's time, a second apart.
func at(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

// A ring of 3 keeps the last 3 samples, oldest first, however many were
// recorded; a summary not synced records nothing.
func TestHistoryWrapsAround(t *testing.T) {
	for _, n := range []int{1, 3, 4, 7} {
		h := NewHistory(3)
		for i := range n {
			h.Record("wharf", at(i), synced(GPUs{Product: "A100", Free: int64(4 - i%5), Total: 4}))
		}
		h.Record("wharf", at(n), Summary{})
		var want []Sample
		for i := max(0, n-3); i < n; i++ {
			want = append(want, Sample{Time: at(i), Used: int64(i % 5), Total: 4})
		}
		if diff := cmp.Diff([]Series{{Product: "A100", Samples: want}}, h.Series("wharf")); diff != "" {
			t.Errorf("%d recorded (-want +got):\n%s", n, diff)
		}
		if got := cap(h.spokes["wharf"]["A100"].buf); got != 3 {
			t.Errorf("%d recorded: the ring's buffer holds %d, want 3", n, got)
		}
	}
}

// A product whose nodes went away records 0 of 0 until its every sample
// is; then it is forgotten. Products come out sorted.
func TestHistoryProductGone(t *testing.T) {
	h := NewHistory(2)
	h.Record("dock", at(0), synced(GPUs{Product: "H100", Free: 8, Total: 16}, GPUs{Product: "L4", Free: 1, Total: 2}))
	h.Record("dock", at(1), synced(GPUs{Product: "H100", Free: 6, Total: 16}))
	want := []Series{
		{Product: "H100", Samples: []Sample{{Time: at(0), Used: 8, Total: 16}, {Time: at(1), Used: 10, Total: 16}}},
		{Product: "L4", Samples: []Sample{{Time: at(0), Used: 1, Total: 2}, {Time: at(1)}}},
	}
	if diff := cmp.Diff(want, h.Series("dock")); diff != "" {
		t.Errorf("L4 gone once (-want +got):\n%s", diff)
	}
	h.Record("dock", at(2), synced(GPUs{Product: "H100", Free: 6, Total: 16}))
	if got := h.Series("dock"); len(got) != 1 || got[0].Product != "H100" {
		t.Errorf("L4 gone for the ring's length: series %+v, want H100's alone", got)
	}
}

// Keep drops the spokes a reload removed and leaves the others alone.
func TestHistoryKeep(t *testing.T) {
	h := NewHistory(HistorySamples)
	for _, c := range []string{"wharf", "dock", "pier"} {
		h.Record(c, at(0), synced(GPUs{Product: "A100", Free: 1, Total: 4}))
	}
	h.Keep(func(c string) bool { return c == "dock" })
	if h.Series("wharf") != nil || h.Series("pier") != nil || len(h.Series("dock")) != 1 {
		t.Errorf("after keeping dock: wharf %v, pier %v, dock %v", h.Series("wharf"), h.Series("pier"), h.Series("dock"))
	}
	if len(h.spokes) != 1 {
		t.Errorf("%d spokes held, want 1", len(h.spokes))
	}
}

// A fleet samples wharf's view (on wharf's kube-apiserver) once it syncs
// and then every interval, each sample its GPUs as Summary counts them; a
// Sync without wharf (a reload that removed it) drops its history.
func TestFleetSamplesHistory(t *testing.T) {
	c := devstacktest.Shared(t).Spoke("wharf")
	f := NewFleet(nil).SampleEvery(100 * time.Millisecond)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx, map[string]kubernetes.Interface{"wharf": c.Client}) }()
	defer func() { stop(); <-done }()

	deadline := time.Now().Add(30 * time.Second)
	var series []Series
	for {
		s, _ := f.History("wharf") // no view until Run has synced
		if len(s) > 0 && len(s[0].Samples) >= 3 {
			series = s
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 3 samples of wharf within 30 s: %+v", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sum, _ := f.Summary("wharf")
	if len(sum.GPUs) == 0 {
		t.Fatalf("wharf's summary has no GPUs: %+v", sum)
	}
	last := series[0].Samples[len(series[0].Samples)-1]
	if series[0].Product != sum.GPUs[0].Product || last.Total != sum.GPUs[0].Total || last.Used != sum.GPUs[0].Total-sum.GPUs[0].Free {
		t.Errorf("last sample %+v of %q, want the summary's %+v", last, series[0].Product, sum.GPUs[0])
	}
	if s := series[0].Samples; s[1].Time.Sub(s[0].Time) < 50*time.Millisecond || !s[1].Time.Before(s[2].Time) {
		t.Errorf("samples not an interval apart, oldest first: %+v", s)
	}

	f.Sync(map[string]kubernetes.Interface{})
	if s, ok := f.History("wharf"); ok || s != nil {
		t.Errorf("History(wharf) after a reload removed it: %+v, %v", s, ok)
	}
	if got := f.history.Series("wharf"); got != nil {
		t.Errorf("wharf's samples kept after its removal: %+v", got)
	}
}
