package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The spoke chart's namespaced RBAC, applied for real to a dev spoke in a
// loop namespace of its own, grants the controller's federated identity
// (through `crucible credential`) exactly what the controller does there,
// and nothing more. (Its cluster-scoped half equals render spoke's, which
// the stack applied; TestHelmSpokeChartMatchesRender checks that.)
func TestHelmSpokeRBACIsWhatTheControllerNeeds(t *testing.T) {
	s := sharedStack(t)
	spoke := s.Spoke("wharf")
	const ns = "chart-loops"
	_, objs := helmTemplate(t, "crucible-spoke", "crucible-authn",
		"--set", "loopNamespace.name="+ns, "--set", "webhook.enabled=false")
	var docs []string
	for _, o := range objs {
		if o.GetNamespace() == ns || (o.GetKind() == "Namespace" && o.GetName() == ns) {
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(b))
		}
	}
	if len(docs) != 4 { // Namespace, turn ServiceAccount, Role, RoleBinding
		t.Fatalf("%d objects in or of %s, want 4", len(docs), ns)
	}
	file := filepath.Join(t.TempDir(), "rbac.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = spoke.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	if out, err := kubectl(t, spoke.KubeconfigFile, "apply", "-f", file); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}

	kc := credentialKubeconfig(t, s, spoke, s.Federation.SpokeTokenFiles[spoke.Name])
	for _, tc := range []struct {
		verb, resource string
		want           string
	}{
		{"create", "pods", "yes"}, {"get", "pods", "yes"}, {"list", "pods", "yes"}, {"watch", "pods", "yes"}, {"delete", "pods", "yes"},
		{"get", "pods --subresource=log", "yes"}, {"create", "configmaps", "yes"}, {"delete", "configmaps", "yes"},
		{"create", "secrets", "yes"}, {"delete", "secrets", "yes"},
		{"update", "pods", "no"}, {"patch", "pods", "no"}, {"create", "pods --subresource=exec", "no"}, {"get", "pods --subresource=attach", "no"}, {"get", "secrets", "no"},
		{"list", "secrets", "no"}, {"get", "configmaps", "no"}, {"create", "serviceaccounts --subresource=token", "no"},
		{"create", "rolebindings", "no"}, {"create", "deployments.apps", "no"},
	} {
		// A subresource needs --subresource: "pods/log" would mean the pod named log.
		args := append([]string{"auth", "can-i", tc.verb}, strings.Fields(tc.resource)...)
		out, _ := kubectl(t, kc, append(args, "-n", ns)...)
		if got := strings.TrimSpace(out); got != tc.want {
			t.Errorf("can-i %s %s in %s = %q, want %q", tc.verb, tc.resource, ns, got, tc.want)
		}
	}
	// And a real round trip of what dispatch creates besides the pod.
	if out, err := kubectl(t, kc, "create", "configmap", "probe", "-n", ns, "--from-literal=k=v"); err != nil {
		t.Fatalf("create configmap as the controller: %v\n%s", err, out)
	}
	if out, err := kubectl(t, kc, "delete", "configmap", "probe", "-n", ns); err != nil {
		t.Errorf("delete configmap as the controller: %v\n%s", err, out)
	}
}
