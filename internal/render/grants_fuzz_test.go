package render

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParseGrants feeds arbitrary bytes to the RBAC file parser: it must
// never panic, and whatever it accepts must be valid, survive a round trip
// through JSON unchanged, and render into RBAC objects.
func FuzzParseGrants(f *testing.F) {
	f.Add([]byte(kueueWorkerRole))
	f.Add([]byte(`{namespaced: {loops: [{apiGroups: [""], resources: [pods], verbs: [get]}]}}`))
	f.Add([]byte(`{"cluster": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]}`))
	f.Add([]byte(`{cluster: [{apiGroups: [""], resources: [pods], verb: [get]}]}`))
	f.Add([]byte(`{namespaced: {"": [{apiGroups: [""], resources: [pods], verbs: [get]}]}}`))
	f.Add([]byte("cluster: [{verbs: [get], nonResourceURLs: [\"\\u0000\"]}]"))
	f.Add([]byte("cluster: &a [*a]"))
	f.Add([]byte("{cluster: null, namespaced: {x: null}}"))
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGrants(data)
		if err != nil {
			return
		}
		if errs := g.Validate(); len(errs) > 0 {
			t.Fatalf("accepted %q with problems: %v", data, errs)
		}
		doc, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseGrants(doc)
		if err != nil {
			t.Fatalf("accepted %q but not its own JSON %s: %v", data, doc, err)
		}
		if diff := cmp.Diff(g, again); diff != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", data, diff)
		}
		f := kueueFederation(g)
		if errs := f.Check(); len(errs) > 0 {
			t.Fatalf("accepted %q but the federation is refused: %v", data, errs)
		}
		if _, err := YAML(f.RBAC()...); err != nil {
			t.Fatalf("render %q: %v", data, err)
		}
	})
}
