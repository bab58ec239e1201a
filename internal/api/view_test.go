package api

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// The pod view shows what ran and the names of env and files, never a value.
func TestViewShowsNamesNotValues(t *testing.T) {
	spec, err := workpod.EncodeStored(workpod.WorkPod{ID: "turn-a", Kind: "turn", Image: "busybox", Command: []string{"sh", "-c"}, Args: []string{"echo hi"},
		Env:         []workpod.EnvVar{{Name: "TOKEN", Value: "env-secret-value"}, {Name: "MODE", Value: "fast"}},
		Files:       map[string]string{"b.txt": "file-content", "a.txt": "other-content"},
		SecretFiles: map[string]string{"key.pem": "secret-file-value"}}, []byte("test-digest-key"))
	if err != nil {
		t.Fatal(err)
	}
	got := view(store.WorkPod{ID: "turn-a", Spec: spec})
	want := apiv1.WorkPod{ID: "turn-a", Image: "busybox", Command: []string{"sh", "-c"}, Args: []string{"echo hi"},
		EnvNames: []string{"TOKEN", "MODE"}, FileNames: []string{"a.txt", "b.txt"}, SecretFileNames: []string{"key.pem"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("view (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"env-secret-value", "file-content", "secret-file-value", "fast"} {
		if strings.Contains(strings.Join(append(append(got.EnvNames, got.FileNames...), got.SecretFileNames...), " "), bad) {
			t.Fatalf("a value reached the view: %q", bad)
		}
	}
	// A spec that is not what the API stored shows nothing of it.
	for _, raw := range []string{`not json`, `{"env":"x"}`, `[]`, ``} {
		if v := view(store.WorkPod{ID: "x", Spec: []byte(raw)}); v.Image != "" || v.EnvNames != nil {
			t.Fatalf("spec %q: %+v", raw, v)
		}
	}
}
