package render

import (
	"bytes"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/runtime"
)

// YAML prints objects as one YAML stream, documents separated by "---", for
// kubectl apply. The output is deterministic: keys are sorted, and fields
// the API server fills (an empty status or spec) are left out. Every object must
// carry its apiVersion and kind.
func YAML(objs ...runtime.Object) ([]byte, error) {
	var out bytes.Buffer
	for i, obj := range objs {
		doc, err := yamlDoc(obj)
		if err != nil {
			return nil, fmt.Errorf("object %d (%T): %w", i, obj, err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(doc)
	}
	return out.Bytes(), nil
}

func yamlDoc(obj runtime.Object) ([]byte, error) {
	if obj == nil {
		return nil, fmt.Errorf("nil object")
	}
	if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.Version == "" || gvk.Kind == "" {
		return nil, fmt.Errorf("no apiVersion or kind")
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	// An empty status (the API server's to fill) and an empty spec (a
	// Namespace's: the API server defaults it) say nothing.
	for _, key := range []string{"status", "spec"} {
		if v, ok := m[key].(map[string]any); ok && len(v) == 0 {
			delete(m, key)
		}
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		if ts, present := meta["creationTimestamp"]; present && ts == nil {
			delete(meta, "creationTimestamp")
		}
	}
	// Marshal the tree directly: sigs.k8s.io/yaml's JSONToYAML re-parses the
	// JSON as YAML, which refuses control characters that a file or an
	// argument may well contain; the emitter quotes and escapes them.
	return yaml.Marshal(numbers(m))
}

// numbers turns the json.Numbers of a decoded tree into int64 or float64, so
// they print as YAML numbers.
func numbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
	}
	return v
}
