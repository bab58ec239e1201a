package workpod

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A stored work pod keeps everything but its secret files' values, which
// never reach the store; decoding gives back the pod without them and
// their names, so a caller knows it cannot dispatch it from the row alone.
func TestStoredKeepsNoSecretValues(t *testing.T) {
	w := WorkPod{ID: "turn-a", Kind: KindTurn, Image: "busybox", Command: []string{"sh"}, Files: map[string]string{"a": "b"},
		SecretFiles: map[string]string{"token": "s3cret-value", "key": "another-secret"}, Shape: Shape{Class: "default", DeadlineSeconds: 60, RunAsUser: 1000, RunAsGroup: 1000}}
	spec, err := EncodeStored(w, []byte("test-digest-key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range w.SecretFiles {
		if strings.Contains(string(spec), v) {
			t.Errorf("stored spec %s holds a secret value", spec)
		}
	}
	got, secrets, err := DecodeStored(spec)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(secrets)
	if !slices.Equal(secrets, []string{"key", "token"}) {
		t.Errorf("secret file names %v, want [key token]", secrets)
	}
	want := w
	want.SecretFiles = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	if _, _, err := DecodeStored([]byte(`{"id":`)); err == nil || !strings.Contains(err.Error(), "decode stored work pod") {
		t.Errorf("truncated spec: %v, want a decode error", err)
	}
}
