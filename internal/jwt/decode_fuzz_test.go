package jwt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
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

// TestDecodeSegmentManyMembers: past the small objects' slice the duplicate
// check moves to a map and still refuses names that differ only in case,
// wherever the two fall.
func TestDecodeSegmentManyMembers(t *testing.T) {
	object := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, `"m%d":%d,`, i, i)
		}
		b.WriteString(extra + "}")
		return base64.RawURLEncoding.EncodeToString([]byte(b.String()))
	}
	for _, tc := range []struct {
		n     int
		extra string
		dup   bool
	}{
		{n: 40, extra: `"last":1`},
		{n: 40, extra: `"M3":1`, dup: true},  // the duplicate of one the slice held, seen once the map took over
		{n: 40, extra: `"M39":1`, dup: true}, // of one the map held
		{n: 15, extra: `"M14":1`, dup: true}, // within the slice
		{n: 16, extra: `"last":1`},           // the slice full, the map made by the last
		{n: 16, extra: `"M0":1`, dup: true},  // the slice full, the duplicate its first
	} {
		members, err := DecodeSegment(object(tc.n, tc.extra))
		switch {
		case tc.dup && err == nil:
			t.Errorf("%d members and %s: accepted a duplicate", tc.n, tc.extra)
		case !tc.dup && err != nil:
			t.Errorf("%d members and %s: %v", tc.n, tc.extra, err)
		case !tc.dup && len(members) != tc.n+1:
			t.Errorf("%d members and %s: decoded %d members, want %d", tc.n, tc.extra, len(members), tc.n+1)
		}
	}
}

// FuzzJSONStrings: the array fast path of aud decodes exactly what
// encoding/json decodes into []string, or leaves the value to it.
func FuzzJSONStrings(f *testing.F) {
	for _, seed := range []string{`[]`, `["a"]`, `["a","b"]`, ` [ "a" , "b" ] `, `["a",null]`, `["\u00e9"]`, `["a\"b"]`,
		`[1]`, `[["a"]]`, "[\"\xff\"]", `["a",]`, `"a"`, `null`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := bytes.TrimSpace(data)
		if !json.Valid(raw) {
			return // DecodeSegment hands on valid JSON only
		}
		got, ok := jsonStrings(raw)
		if !ok {
			return
		}
		var want []string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("jsonStrings(%q) = %q, encoding/json refuses it: %v", raw, got, err)
		}
		if !slices.Equal(got, want) || (got == nil) != (want == nil) {
			t.Fatalf("jsonStrings(%q) = %q, encoding/json %q", raw, got, want)
		}
	})
}
