package jwt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// streamingDecode is the member-by-member decoder DecodeSegment replaced
// (json.Decoder tokens, a set of case-folded names): slower, and plainly
// right, so the fuzz test below holds the fast one to it.
func streamingDecode(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	members := map[string]json.RawMessage{}
	folded := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		if folded[strings.ToLower(name)] {
			return nil, errors.New("duplicate member")
		}
		folded[strings.ToLower(name)] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		members[name] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return members, nil
}

// FuzzDecodeSegment: DecodeSegment accepts exactly what the streaming
// decoder accepts, with the same members.
func FuzzDecodeSegment(f *testing.F) {
	for _, seed := range []string{
		`{"sub":"a","iss":"b"}`, `{"sub":"a","Sub":"b"}`, `{"sub":"a","\u0073ub":"b"}`,
		`{"x":"\":","sub":"a","sub":"b"}`, `{"x":{"k":1,"k":2},"y":[1,{"a":":"}]}`,
		`{"sub":"a"}{}`, `null`, `["a"]`, ` {"a":1} `, `{"a":1,}`, `{"\u00e9":1,"\u00c9":2}`,
		`{"K":1,"\u212a":2}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gotErr := DecodeSegment(base64.RawURLEncoding.EncodeToString(data))
		want, wantErr := streamingDecode(data)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("DecodeSegment(%q) err = %v, streaming decoder err = %v", data, gotErr, wantErr)
		}
		if gotErr == nil {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("DecodeSegment(%q) members (-streaming +fast):\n%s", data, diff)
			}
		}
	})
}
