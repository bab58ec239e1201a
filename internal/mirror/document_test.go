package mirror

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// FuzzRewriteDiscovery checks that whatever the hub sends, an accepted
// document keeps every field but jwks_uri as sent (issuer byte for byte) and
// points jwks_uri at the mirror.
func FuzzRewriteDiscovery(f *testing.F) {
	for _, seed := range []string{
		hubDiscovery,
		`{"issuer":"https:\/\/kubernetes.default.svc\u0026<x>","jwks_uri":"j","x":[1, 2, {"a" : null}]}`,
		`{"issuer":"a","jwks_uri":"b","issuer":"c"}`,
		`{"issuer":"a","jwks_uri":"b","\u006awks_uri":"c"}`,
		`{}`, `[]`, `null`, `{"issuer":1}`, "{\"issuer\":\"\xff\",\"jwks_uri\":\"j\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := rewriteDiscovery(body, mirrorJWKS)
		if err != nil {
			return
		}
		var in, got map[string]json.RawMessage
		if err := json.Unmarshal(body, &in); err != nil {
			t.Fatalf("accepted a body that is not a JSON object: %v", err)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("served a body that is not a JSON object: %v", err)
		}
		if len(got) != len(in) {
			t.Errorf("served %d fields, hub sent %d", len(got), len(in))
		}
		for k, raw := range in {
			want := raw
			if k == "jwks_uri" {
				want = json.RawMessage(strconv.Quote(mirrorJWKS))
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, want); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(compact.Bytes(), got[k]) {
				t.Errorf("field %q = %s, want %s", k, got[k], compact.Bytes())
			}
		}
	})
}
