package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"

	"crucible.dev/crucible/internal/render"
)

// render hub prints the token-request Role and its binding only with
// --token-request, after the rest.
func TestRenderHubTokenRequest(t *testing.T) {
	base := render.HubRBAC("ops", "ctl")
	for _, tc := range []struct {
		flags []string
		want  []runtime.Object
	}{
		{nil, base},
		{[]string{"--token-request"}, append(render.HubRBAC("ops", "ctl"), render.HubTokenRequestRBAC("ops", "ctl")...)},
		{[]string{"--token-request", "--cluster-profiles", "fleet"},
			append(append(render.HubRBAC("ops", "ctl"), render.HubTokenRequestRBAC("ops", "ctl")...), render.HubClusterProfilesRBAC("fleet", "ops", "ctl")...)},
	} {
		want, err := render.YAML(tc.want...)
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		args := append([]string{"render", "hub", "--namespace", "ops", "--service-account", "ctl"}, tc.flags...)
		if err := Run(t.Context(), args, &out, &errOut); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut.String())
		}
		if diff := cmp.Diff(string(want), out.String()); diff != "" {
			t.Errorf("%v (-want +got):\n%s", args, diff)
		}
	}
}

// A --cluster-profiles namespace that is no DNS label is refused, naming
// the flag, before anything is printed.
func TestRenderHubClusterProfilesNamespace(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Run(t.Context(), []string{"render", "hub", "--cluster-profiles", "Fleet/NS"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `--cluster-profiles "Fleet/NS"`) || out.Len() != 0 {
		t.Errorf("err %v, out %q: want a refusal naming the flag and nothing printed", err, out.String())
	}
}
