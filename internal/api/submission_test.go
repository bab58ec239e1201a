package api

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/store"
)

// newSubmission decides a submit without a store or a spoke: the defaults,
// the cluster, validation and the digest, table-tested.
func TestNewSubmission(t *testing.T) {
	p := &fleet.Profile{DefaultCluster: "wharf", Clusters: []fleet.ClusterEntry{
		{Name: "wharf", LoopNamespace: "loops"}, {Name: "dock", LoopNamespace: "dock-loops"}}}
	id := func(prefix string) string { return prefix + "-fixed" }
	tests := []struct {
		name      string
		req       SubmitRequest
		key       string
		wantRow   store.WorkPod // Spec and RequestSHA256 are checked apart
		wantField string        // the 400's field; "" for a submission
		digest    bool
	}{
		{name: "defaults", req: SubmitRequest{Image: "busybox", Command: []string{"true"}},
			wantRow: store.WorkPod{ID: "turn-fixed", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StatePending, Submitter: "alice"}},
		{name: "a loop on dock, with a key", req: SubmitRequest{Kind: "loop", Cluster: "dock", Image: "busybox"}, key: "k1", digest: true,
			wantRow: store.WorkPod{ID: "loop-fixed", Cluster: "dock", Namespace: "dock-loops", Kind: "loop", State: store.StatePending, Submitter: "alice", IdempotencyKey: "k1"}},
		{name: "unknown cluster", req: SubmitRequest{Cluster: "nowhere", Image: "busybox"}, wantField: "cluster"},
		{name: "no image", req: SubmitRequest{}, wantField: "image"},
		{name: "bad kind", req: SubmitRequest{Kind: "batch", Image: "busybox"}, wantField: "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := newSubmission(p, tt.req, "alice", tt.key, id)
			if tt.wantField != "" {
				he, ok := errors.AsType[*httperr.Error](err)
				if !ok || he.Code != http.StatusBadRequest || he.Field != tt.wantField {
					t.Fatalf("err = %v, want a 400 naming field %q", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := sub.row
			if len(got.Spec) == 0 {
				t.Error("no spec stored with the row")
			}
			if (got.RequestSHA256 != "") != tt.digest {
				t.Errorf("request digest %q, want one only with a key", got.RequestSHA256)
			}
			got.Spec, got.RequestSHA256 = nil, ""
			if diff := cmp.Diff(tt.wantRow, got); diff != "" {
				t.Errorf("row (-want +got):\n%s", diff)
			}
			if pod := sub.pod.Pod(); pod.ID != got.ID || pod.Kind != got.Kind {
				t.Errorf("pod %s (%s) is not the row's %s (%s)", pod.ID, pod.Kind, got.ID, got.Kind)
			}
		})
	}
}

// A retry that names the defaults is the same request as one that left
// them out: the digest is taken with them filled in.
func TestNewSubmissionDigestsWithDefaults(t *testing.T) {
	p := &fleet.Profile{DefaultCluster: "wharf", Clusters: []fleet.ClusterEntry{{Name: "wharf", LoopNamespace: "loops"}}}
	id := func(prefix string) string { return prefix + "-fixed" }
	bare, err := newSubmission(p, SubmitRequest{Image: "busybox"}, "alice", "k", id)
	if err != nil {
		t.Fatal(err)
	}
	named, err := newSubmission(p, SubmitRequest{Kind: "turn", Cluster: "wharf", Image: "busybox"}, "alice", "k", id)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newSubmission(p, SubmitRequest{Image: "alpine"}, "alice", "k", id)
	if err != nil {
		t.Fatal(err)
	}
	if bare.row.RequestSHA256 != named.row.RequestSHA256 {
		t.Errorf("digests differ for one request with and without its defaults: %s, %s", bare.row.RequestSHA256, named.row.RequestSHA256)
	}
	if bare.row.RequestSHA256 == other.row.RequestSHA256 {
		t.Error("two different requests share a digest")
	}
}
