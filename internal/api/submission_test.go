package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// newSubmission decides a submit without a store or a spoke: the defaults,
// the cluster, validation and the digest, table-tested.
func TestNewSubmission(t *testing.T) {
	p := testProfile(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops"}, profile.ClusterEntry{Name: "dock", LoopNamespace: "dock-loops"})
	id := func(prefix string) string { return prefix + "-fixed" }
	tests := []struct {
		name      string
		req       apiv1.SubmitRequest
		key       string
		wantRow   store.WorkPod // Spec and RequestSHA256 are checked apart
		wantField string        // the 400's field; "" for a submission
		digest    bool
	}{
		{name: "defaults", req: apiv1.SubmitRequest{Image: "busybox", Command: []string{"true"}},
			wantRow: store.WorkPod{ID: "turn-fixed", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StatePending, Submitter: "alice"}},
		{name: "a loop on dock, with a key", req: apiv1.SubmitRequest{Kind: "loop", Cluster: "dock", Image: "busybox"}, key: "k1", digest: true,
			wantRow: store.WorkPod{ID: "loop-fixed", Cluster: "dock", Namespace: "dock-loops", Kind: "loop", State: store.StatePending, Submitter: "alice", IdempotencyKey: "k1"}},
		{name: "unknown cluster", req: apiv1.SubmitRequest{Cluster: "nowhere", Image: "busybox"}, wantField: "cluster"},
		{name: "no image", req: apiv1.SubmitRequest{}, wantField: "image"},
		{name: "bad kind", req: apiv1.SubmitRequest{Kind: "batch", Image: "busybox"}, wantField: "kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := newSubmission(p, tt.req, alice, tt.key, testDigestKey, id)
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
	p := testProfile(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops"})
	id := func(prefix string) string { return prefix + "-fixed" }
	bare, err := newSubmission(p, apiv1.SubmitRequest{Image: "busybox"}, alice, "k", testDigestKey, id)
	if err != nil {
		t.Fatal(err)
	}
	named, err := newSubmission(p, apiv1.SubmitRequest{Kind: "turn", Cluster: "wharf", Image: "busybox"}, alice, "k", testDigestKey, id)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newSubmission(p, apiv1.SubmitRequest{Image: "alpine"}, alice, "k", testDigestKey, id)
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

var alice = apiauth.Identity{User: "alice", Groups: []string{"system:authenticated"}}

// testDigestKey stands for the store's digest key where no store is.
var testDigestKey = []byte("0123456789abcdef0123456789abcdef")

// testProfile is a defaulted profile (profile.Default: the standard class)
// with these clusters, the first the default.
func testProfile(clusters ...profile.ClusterEntry) *profile.Profile {
	p := profile.Default()
	p.DefaultCluster, p.Clusters = clusters[0].Name, clusters
	return &p
}

// A submission's class becomes its shape: the kind's default without one,
// the class's bounds and groups and the cluster's withholding enforced.
func TestNewSubmissionClasses(t *testing.T) {
	p := testProfile(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops"},
		profile.ClusterEntry{Name: "dock", LoopNamespace: "loops", Classes: map[string]profile.ClassAdjust{"gpu": {Withhold: true}}})
	gpu := profile.PodClass{Name: "gpu", GPUs: 1, GPUResource: "nvidia.com/gpu", Groups: []string{"ml"},
		Requests: map[string]profile.Quantity{"cpu": {Quantity: resource.MustParse("1")}, "memory": {Quantity: resource.MustParse("1Gi")}},
		Deadline: profile.Duration{Duration: time.Hour}, MaxDeadline: profile.Duration{Duration: 2 * time.Hour}, RunAsUser: 1, RunAsGroup: 1,
		Allow: profile.ClassAllow{GPUs: profile.IntRange{Min: 1, Max: 8}}}
	p.Pods.Classes = append(p.Pods.Classes, gpu)
	ml := apiauth.Identity{User: "bo", Groups: []string{"ml"}}
	id := func(prefix string) string { return prefix + "-fixed" }

	sub, err := newSubmission(p, apiv1.SubmitRequest{Image: "x"}, alice, "", testDigestKey, id)
	if err != nil || sub.pod.Pod().Shape.Class != "standard" || sub.pod.Pod().Shape.DeadlineSeconds != 6*3600 {
		t.Fatalf("no class: %+v, %v; want the default class's shape", sub.pod.Pod().Shape, err)
	}
	sub, err = newSubmission(p, apiv1.SubmitRequest{Image: "x", Class: "gpu", GPUs: new(2), Deadline: "90m"}, ml, "", testDigestKey, id)
	if err != nil {
		t.Fatal(err)
	}
	shape := sub.pod.Pod().Shape
	if n := shape.Resources.Limits["nvidia.com/gpu"]; n.Value() != 2 || shape.DeadlineSeconds != 90*60 {
		t.Errorf("gpu with 2 GPUs for 90m: limits %v deadline %d", shape.Resources.Limits, shape.DeadlineSeconds)
	}
	var stored struct{ Shape struct{ Class string } }
	if err := json.Unmarshal(sub.row.Spec, &stored); err != nil || stored.Shape.Class != "gpu" {
		t.Errorf("stored spec %s: want the shape kept with the pod", sub.row.Spec)
	}

	for _, tc := range []struct {
		name   string
		req    apiv1.SubmitRequest
		caller apiauth.Identity
		code   int
		field  string
		msg    string
	}{
		{"above the class's bound", apiv1.SubmitRequest{Image: "x", Class: "gpu", GPUs: new(9)}, ml, 422, "gpus", `must be from 1 to 8 for class "gpu"`},
		{"a deadline beyond the class's", apiv1.SubmitRequest{Image: "x", Class: "gpu", Deadline: "3h"}, ml, 422, "deadline", "must be at most 2h0m0s"},
		{"not offered there", apiv1.SubmitRequest{Image: "x", Class: "gpu", Cluster: "dock"}, ml, 422, "class", `class "gpu" is not offered on cluster "dock"`},
		{"no such class", apiv1.SubmitRequest{Image: "x", Class: "tpu"}, ml, 422, "class", `no class "tpu"`},
		{"outside the class's groups", apiv1.SubmitRequest{Image: "x", Class: "gpu"}, alice, 403, "", `class "gpu" is only for members of ml`},
		{"a bad kind with the default class", apiv1.SubmitRequest{Image: "x", Kind: "batch"}, ml, 400, "kind", "Unsupported value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newSubmission(p, tc.req, tc.caller, "", testDigestKey, id)
			he, ok := errors.AsType[*httperr.Error](err)
			if !ok || he.Code != tc.code || he.Field != tc.field || !strings.Contains(he.Msg, tc.msg) {
				t.Fatalf("err = %#v, want %d naming field %q with %q", err, tc.code, tc.field, tc.msg)
			}
		})
	}
}

// Annotations pass the profile's metadata_prefixes: a key outside them is
// 422 naming the key and the profile key to change; a malformed key is
// still validation's 400; crucible's own prefix is never the submitter's.
func TestNewSubmissionMetadataPrefixes(t *testing.T) {
	p := testProfile(profile.ClusterEntry{Name: "wharf", LoopNamespace: "loops"})
	p.Pods.MetadataPrefixes = []string{"example.com/"}
	id := func(prefix string) string { return prefix + "-fixed" }
	tests := []struct {
		key      string
		wantCode int // 0: accepted
	}{
		{"example.com/team", 0},
		{"sidecar.istio.io/inject", http.StatusUnprocessableEntity},
		{"example.com.evil/x", http.StatusUnprocessableEntity},
		{"crucible.dev/work-pod", http.StatusUnprocessableEntity},
		{"team", http.StatusUnprocessableEntity},
		{"example.com/bad key", http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			req := apiv1.SubmitRequest{Image: "busybox", Annotations: map[string]string{tt.key: "v"}}
			sub, err := newSubmission(p, req, alice, "", testDigestKey, id)
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if got := sub.pod.Pod().Annotations[tt.key]; got != "v" {
					t.Errorf("annotation %q = %q, want it kept", tt.key, got)
				}
				return
			}
			he, ok := errors.AsType[*httperr.Error](err)
			if !ok || he.Code != tt.wantCode || he.Field != "annotations["+tt.key+"]" {
				t.Fatalf("err = %v, want %d naming annotations[%s]", err, tt.wantCode, tt.key)
			}
			if tt.wantCode == http.StatusUnprocessableEntity && !strings.Contains(he.Msg, tt.key) {
				t.Errorf("message %q does not name the key", he.Msg)
			}
			if tt.wantCode == http.StatusUnprocessableEntity && tt.key != "crucible.dev/work-pod" && !strings.Contains(he.Msg, "[pods] metadata_prefixes") {
				t.Errorf("message %q does not name the profile key", he.Msg)
			}
		})
	}
}
