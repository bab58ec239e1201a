package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// render turn checks the pod once, through workpod.Check, and names each
// problem by the flag that set it; nothing is printed.
func TestRenderTurnNamesBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Run(t.Context(), []string{"render", "turn", "--config", exampleProfile, "--id", "Bad_ID", "--kind", "job",
		"--image", "busybox", "--env", "OK=1", "--env", "CRUCIBLE_X=1"}, &out, &errOut)
	if err == nil {
		t.Fatal("render turn accepted a bad id, kind and env")
	}
	want := []string{
		`--id: Invalid value: "Bad_ID": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', ` +
			`and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
		`--kind: Unsupported value: "job": supported values: "loop", "turn"`,
		`--env "CRUCIBLE_X=1": Invalid value: "CRUCIBLE_X": names starting with CRUCIBLE_ are reserved for crucible`,
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if out.Len() != 0 {
		t.Errorf("printed %q", out.String())
	}
}

// A pod that checks is printed as the controller would dispatch it.
func TestRenderTurnPrintsThePod(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Run(t.Context(), []string{"render", "turn", "--config", exampleProfile, "--id", "loop-1", "--kind", "loop",
		"--image", "busybox", "--env", "MODEL=m1", "--", "sh", "-c", "echo hi"}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(out.Bytes(), &pod); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	c := pod.Spec.Containers[0]
	if pod.Name != "loop-1" || pod.Labels["crucible.dev/kind"] != "loop" || c.Image != "busybox" ||
		cmp.Diff([]string{"sh"}, c.Command) != "" || cmp.Diff([]string{"-c", "echo hi"}, c.Args) != "" ||
		c.Env[0] != (corev1.EnvVar{Name: "MODEL", Value: "m1"}) {
		t.Errorf("rendered pod:\n%s", out.String())
	}
}
