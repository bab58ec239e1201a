package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"crucible.dev/crucible/internal/devstack"
)

// repoRoot is the checkout this test package lives in.
const repoRoot = "../.."

// chartDir is a chart under deploy/helm.
func chartDir(name string) string { return filepath.Join(repoRoot, "deploy", "helm", name) }

var helmVersionLine = regexp.MustCompile(`(?m)^HELM_VERSION=(\S+)$`)

// helmBinary is helm as hack/build-tools.sh builds it into the tool cache:
// the version is read from the script, so the two cannot drift.
func helmBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs helm from the tool cache; run without -short")
	}
	script, err := os.ReadFile(filepath.Join(repoRoot, "hack", "build-tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := helmVersionLine.FindSubmatch(script)
	if m == nil {
		t.Fatal("hack/build-tools.sh sets no HELM_VERSION")
	}
	bin := filepath.Join(devstack.FindTools().Dir, "helm-"+string(m[1]), "helm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm not built (%v): run make tools, or set CRUCIBLE_TOOLS_DIR to a tool cache that has it", err)
	}
	return bin
}

// helm runs helm with no user configuration (no repositories, no cache of
// the developer's) and returns its stdout.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(t.Context(), helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home, "KUBECONFIG=/dev/null")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.Join(err, errors.New(stderr.String()))
	}
	return stdout.String(), nil
}

// helmTemplate renders chart in namespace with the values files and --set
// arguments given, and decodes every object.
func helmTemplate(t *testing.T, chart, namespace string, extra ...string) (string, []*unstructured.Unstructured) {
	t.Helper()
	out, err := helm(t, append([]string{"template", "crucible", chartDir(chart), "--namespace", namespace}, extra...)...)
	if err != nil {
		t.Fatalf("helm template %s %v: %v", chart, extra, err)
	}
	return out, decodeObjects(t, out)
}

// decodeObjects splits a YAML stream into objects, skipping empty documents.
func decodeObjects(t testing.TB, stream string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range yamlDocs(t, []byte(stream)) {
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// yamlDocs splits a YAML stream into its documents, leaving out the blank ones.
func yamlDocs(t testing.TB, stream []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// find returns the one object of kind and name.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s among %d objects", kind, name, len(objs))
	return nil
}

// configMapData is a ConfigMap's data[key].
func configMapData(t *testing.T, objs []*unstructured.Unstructured, name, key string) string {
	t.Helper()
	v, ok, err := unstructured.NestedString(find(t, objs, "ConfigMap", name).Object, "data", key)
	if !ok || err != nil {
		t.Fatalf("ConfigMap %s has no data %q (%v)", name, key, err)
	}
	return v
}
