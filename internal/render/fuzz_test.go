package render

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"crucible.dev/crucible/internal/workpod"
)

// FuzzValidateWorkPod feeds arbitrary ids, kinds, images and keys through
// workpod.Check and Turn: neither may panic, and whatever Check accepts,
// Turn must render into objects whose names the API server accepts.
func FuzzValidateWorkPod(f *testing.F) {
	f.Add("turn-1", "turn", "busybox", "MODEL", "prompt.md", "api-key", "kwok.x-k8s.io/delay")
	f.Add("", "", "", "", "", "", "")
	f.Add("Turn_1", "job", " img", "CRUCIBLE_X", "../etc", "a/b", "bad key")
	f.Add("a-", "loop", "x", "1X", "..", ".", "a/b/c")
	f.Add("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "turn", "x", "_", "..a", "-", "A.example.com/B")
	f.Add("x", "turn", "x", "my.var", "\xff", "\x00", "é")
	f.Add("rturn-1", "turn", "bu\x7f\xff\xff\xffx", "MODEL", "prompt.md", "api-key", "kwok.x-k8s.io/delay")
	f.Add("t", "loop", "x", "A", "f", "\x1b[0m\x7f", "a")
	f.Fuzz(func(t *testing.T, id, kind, image, envName, fileKey, secretKey, annotationKey string) {
		w := workpod.WorkPod{
			ID:          id,
			Kind:        kind,
			Image:       image,
			Env:         []workpod.EnvVar{{Name: envName, Value: fileKey}},
			Files:       map[string]string{fileKey: secretKey},
			SecretFiles: map[string]string{secretKey: fileKey},
			Annotations: map[string]string{annotationKey: id},
		}
		v, errs := workpod.Check(w)
		if len(errs) > 0 {
			return
		}
		objs, err := Turn(wharf(), defaultedPods(), "crucible", v)
		if err != nil {
			t.Fatalf("Check accepted %+v but Turn refused it: %v", w, err)
		}
		for _, name := range []string{objs.Pod.Name, objs.ConfigMap.Name, objs.Secret.Name} {
			if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
				t.Errorf("object name %q: %v", name, msgs)
			}
		}
		for k, v := range objs.Pod.Labels {
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				t.Errorf("label %s=%q: %v", k, v, msgs)
			}
		}
		if _, err := YAML(objs.List()...); err != nil {
			t.Errorf("YAML: %v", err)
		}
	})
}
