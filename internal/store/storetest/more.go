package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"crucible.dev/crucible/internal/store"
)

func testCancelledContext(t *testing.T, s store.Store) {
	mustCreate(t, s, pod("ctx"))
	before := mustGet(t, s, "ctx")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := map[string]func() error{
		"create": func() error { _, err := s.CreateWorkPod(ctx, pod("ctx2")); return err },
		"get":    func() error { _, err := s.GetWorkPod(ctx, "ctx"); return err },
		"list":   func() error { _, err := s.ListWorkPods(ctx, store.Filter{}); return err },
		"update": func() error {
			_, err := s.UpdateWorkPod(ctx, "ctx", func(p *store.WorkPod) error { p.Reason = "x"; return nil })
			return err
		},
		"transition": func() error {
			_, err := s.TransitionWorkPod(ctx, "ctx", store.Transition{To: store.StateRunning})
			return err
		},
		"put artifact": func() error {
			_, err := s.PutArtifact(ctx, store.Artifact{PodID: "ctx", Kind: "log", Size: 1, SHA256: sha("a"), Source: store.SourcePod}, store.Quota{})
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: got %v, want context.Canceled", name, err)
		}
	}
	if diff := cmp.Diff(before, mustGet(t, s, "ctx")); diff != "" {
		t.Errorf("row changed (-want +got):\n%s", diff)
	}
	if _, err := s.GetWorkPod(t.Context(), "ctx2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get ctx2: got %v, want ErrNotFound", err)
	}
}

func testTimeRoundTrip(t *testing.T, s store.Store) {
	tests := []struct {
		name string
		in   time.Time
	}{
		{"unix epoch", time.Unix(0, 0)},
		{"nanoseconds", time.Date(2026, 7, 1, 12, 30, 45, 123456789, time.UTC)},
		{"one nanosecond past a microsecond", time.Date(2026, 7, 1, 12, 30, 45, 1001, time.UTC)},
		{"east of UTC", time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.FixedZone("IST", 5*3600+1800))},
		{"west of UTC, across midnight", time.Date(2026, 12, 31, 22, 0, 0, 7, time.FixedZone("EST", -5*3600))},
		{"local zone", time.Date(2027, 3, 28, 2, 30, 0, 0, time.Local)},
		{"before 1970", time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC)},
		{"far future", time.Date(2261, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		{"with monotonic reading", time.Now()},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("t%d", i)
			mustCreate(t, s, pod(id, func(p *store.WorkPod) { p.FinishedAt = ptr(tc.in) }))
			got := mustGet(t, s, id).FinishedAt
			if got == nil {
				t.Fatal("FinishedAt nil")
			}
			if !got.Equal(tc.in) || got.Location() != time.UTC {
				t.Errorf("FinishedAt = %v (%v), want %v in UTC", got, got.Location(), tc.in.UTC())
			}
			if got.Nanosecond() != tc.in.Nanosecond() {
				t.Errorf("nanoseconds = %d, want %d", got.Nanosecond(), tc.in.Nanosecond())
			}
		})
	}
}

func testSpecBytes(t *testing.T, s store.Store) {
	specs := map[string][]byte{
		"json":       []byte(`{"prompt":"sélection ✓","n":1e400,"s":"\u0000"}`),
		"binary":     {0x00, 0xff, 0xfe, 0x80, '\'', '"', '\\', 0x00},
		"large":      []byte(strings.Repeat(`{"k":"v"},`, 30_000)),
		"not utf8":   {0xc3, 0x28},
		"whitespace": []byte(" \n\t "),
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			mustCreate(t, s, pod("spec-"+strings.ReplaceAll(name, " ", "-"), func(p *store.WorkPod) { p.Spec = spec }))
			got := mustGet(t, s, "spec-"+strings.ReplaceAll(name, " ", "-")).Spec
			if !bytes.Equal(spec, got) || got == nil {
				t.Errorf("spec = %d bytes %q…, want %d bytes %q…", len(got), head(got), len(spec), head(spec))
			}
		})
	}
}

func head(b []byte) []byte { return b[:min(len(b), 32)] }

// sha returns a distinct, well-formed hex digest for a label.
func sha(label string) string {
	sum := sha256.Sum256([]byte(label))
	return hex.EncodeToString(sum[:])
}

// hostile strings must round-trip byte for byte and match only themselves:
// every value reaches the database as a parameter, never as SQL text.
var hostile = []string{
	`it's`,
	`"quoted"`,
	`'; DROP TABLE work_pods; --`,
	`x' OR '1'='1`,
	`back\slash\`,
	`?`, `$1`, `:name`, `@p`, `%`, `_`, `%_*`,
	"tab\tnew\nline\r",
	`ünïcødé-名前-🚀`,
	"\u200b zero width \ufeff",
	strings.Repeat("long", 500),
}

func testHostileInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustCreate(t, s, pod("plain"))
	for i, v := range hostile {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			in := pod(v, func(p *store.WorkPod) { p.Cluster, p.Kind, p.Namespace, p.Reason, p.PodUID = v, v, v, v, v })
			mustCreate(t, s, in)
			if diff := cmp.Diff(in, mustGet(t, s, v), ignoreStoreTimes); diff != "" {
				t.Errorf("get (-want +got):\n%s", diff)
			}
			list, err := s.ListWorkPods(ctx, store.Filter{Cluster: v, Kind: v})
			if err != nil || len(list) != 1 || list[0].ID != v {
				t.Errorf("list by cluster/kind %q = %d rows, %v; want exactly the one", v, len(list), err)
			}
			updated, err := s.UpdateWorkPod(ctx, v, func(p *store.WorkPod) error { p.Reason = v + v; return nil })
			if err != nil || updated.Reason != v+v {
				t.Errorf("update = %q, %v", updated.Reason, err)
			}
			a := store.Artifact{PodID: v, Kind: v, Size: int64(len(v)), SHA256: sha(v), Source: store.SourcePod}
			if created, err := s.PutArtifact(ctx, a, store.Quota{MaxKinds: 1, MaxBytes: 1 << 20}); err != nil || !created {
				t.Fatalf("put artifact = %v, %v", created, err)
			}
			got, err := s.GetArtifact(ctx, v, v)
			if err != nil {
				t.Fatalf("get artifact: %v", err)
			}
			if diff := cmp.Diff(a, got, cmpopts.IgnoreFields(store.Artifact{}, "CreatedAt")); diff != "" {
				t.Errorf("artifact (-want +got):\n%s", diff)
			}
		})
	}
	// Nothing was dropped or widened: every row is still there, and the
	// plain row matches no hostile filter.
	all, err := s.ListWorkPods(ctx, store.Filter{})
	if err != nil || len(all) != len(hostile)+1 {
		t.Errorf("list all = %d rows, %v; want %d", len(all), err, len(hostile)+1)
	}
	if got := mustGet(t, s, "plain"); got.Cluster != "wharf" || got.Reason != "" {
		t.Errorf("plain row changed: %+v", got)
	}
}

// errAny stands for "some error, no particular sentinel".
var errAny = errors.New("any error")

func checkErr(t *testing.T, got, want error) {
	t.Helper()
	switch {
	case want == nil && got != nil:
		t.Errorf("err = %v, want nil", got)
	case errors.Is(want, errAny):
		if got == nil {
			t.Error("err = nil, want an error")
		}
		for _, s := range []error{store.ErrConflict, store.ErrNotFound, store.ErrQuota, store.ErrFull} {
			if errors.Is(got, s) {
				t.Errorf("err = %v wraps %v, want neither sentinel", got, s)
			}
		}
	case want != nil && !errors.Is(got, want):
		t.Errorf("err = %v, want %v", got, want)
	}
}

// GetWorkPods finds the rows that exist — across more ids than one query
// takes, missing and hostile ids among them — equal to GetWorkPod's but for
// the spec; none for no ids.
func testGetMany(t *testing.T, s store.Store) {
	var ids []string
	for i := range 1203 {
		id := fmt.Sprintf("many-%04d", i)
		ids = append(ids, id)
		if i%3 == 0 {
			mustCreate(t, s, pod(id, func(p *store.WorkPod) { p.Spec = []byte(`{"image":"x"}`) }))
		}
	}
	ids = append(ids, "many-0000", "", "x' OR '1'='1", strings.Repeat("z", 10_000))
	got, err := s.GetWorkPods(t.Context(), ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 401 {
		t.Errorf("%d rows, want 401", len(got))
	}
	for _, id := range []string{"many-0000", "many-0600", "many-1200"} {
		want := mustGet(t, s, id)
		want.Spec = nil
		if diff := cmp.Diff(want, got[id]); diff != "" {
			t.Errorf("row %s differs from GetWorkPod's (-want +got):\n%s", id, diff)
		}
	}
	if _, ok := got["many-0001"]; ok {
		t.Error("a row for an id never created")
	}
	none, err := s.GetWorkPods(t.Context(), nil)
	if err != nil || len(none) != 0 {
		t.Errorf("no ids: %v, %v; want no rows", none, err)
	}
}
