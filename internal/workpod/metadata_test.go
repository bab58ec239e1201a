package workpod

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Submitted annotation keys pass only under a profile prefix, never under
// crucible's own, whatever case or lookalike a hostile submitter tries.
func TestCheckMetadataKeys(t *testing.T) {
	example := []string{"example.com/"}
	tests := []struct {
		name     string
		key      string
		prefixes []string
		refused  bool
	}{
		{"under the prefix", "example.com/team", example, false},
		{"under the prefix, other case", "Example.COM/team", example, false},
		{"under the second prefix", "ops.example.org/owner", []string{"example.com/", "ops.example.org/"}, false},
		{"default admits nothing", "example.com/team", nil, true},
		{"no prefix", "team", example, true},
		{"kubernetes.io", "kubernetes.io/psp", example, true},
		{"kubernetes.io subdomain", "pod-security.kubernetes.io/enforce", example, true},
		{"istio injection", "sidecar.istio.io/inject", example, true},
		{"prefix as part of a name", "example.com.evil/x", example, true},
		{"subdomain of the prefix", "sub.example.com/x", example, true},
		{"prefix without its slash", "example.comx/y", example, true},
		{"crucible's own", "crucible.dev/work-pod", example, true},
		{"crucible's own, upper case", "CRUCIBLE.DEV/instance", example, true},
		{"crucible's own, even when listed", "crucible.dev/kind", []string{"crucible.dev/"}, true},
		{"unicode lookalike prefix", "exаmple.com/x", example, true}, // Cyrillic а
		{"unicode after a prefix-like start", "example.com\u2215x", example, true},
		{"very long", strings.Repeat("a", 10000) + ".example.com/x", example, true},
		{"very long under the prefix", "example.com/" + strings.Repeat("x", 10000), example, false},
		{"a prefix without slash admits nothing", "example.com.evil/x", []string{"example.com"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := WorkPod{Annotations: map[string]string{tt.key: "v"}}
			errs := CheckMetadataKeys(w, tt.prefixes)
			if !tt.refused {
				if len(errs) != 0 {
					t.Fatalf("CheckMetadataKeys(%.40q) = %v, want none", tt.key, errs)
				}
				return
			}
			want := []fieldErr{{field.ErrorTypeForbidden, "annotations[" + tt.key + "]", ""}}
			if diff := cmp.Diff(want, project(errs)); diff != "" {
				t.Fatalf("CheckMetadataKeys (-want +got):\n%s", diff)
			}
			if !strings.Contains(errs[0].Detail, "crucible's own") && !strings.Contains(errs[0].Detail, "[pods] metadata_prefixes") {
				t.Errorf("detail %q names neither crucible's prefix nor the profile key", errs[0].Detail)
			}
		})
	}
}

// Every refused key is reported, in sorted order, and allowed ones are not.
func TestCheckMetadataKeysReportsAll(t *testing.T) {
	w := WorkPod{Annotations: map[string]string{
		"example.com/ok": "1", "sidecar.istio.io/inject": "true", "crucible.dev/x": "y", "bare": "z",
	}}
	want := []fieldErr{
		{field.ErrorTypeForbidden, "annotations[bare]", ""},
		{field.ErrorTypeForbidden, "annotations[crucible.dev/x]", ""},
		{field.ErrorTypeForbidden, "annotations[sidecar.istio.io/inject]", ""},
	}
	if diff := cmp.Diff(want, project(CheckMetadataKeys(w, []string{"example.com/"}))); diff != "" {
		t.Errorf("CheckMetadataKeys (-want +got):\n%s", diff)
	}
}
