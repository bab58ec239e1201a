package jwt

import (
	"encoding/base64"
	"testing"
)

func TestDecodeSegment(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	cases := []struct {
		name, seg string
		ok        bool
		sub       string
	}{
		{"object", enc([]byte(`{"sub":"a","iss":"b"}`)), true, `"a"`},
		{"case-folded duplicate", enc([]byte(`{"sub":"a","Sub":"b"}`)), false, ""},
		{"exact duplicate", enc([]byte(`{"sub":"a","sub":"b"}`)), false, ""},
		{"trailing data", enc([]byte(`{"sub":"a"}{}`)), false, ""},
		{"nested duplicates are the claim's business", enc([]byte(`{"sub":"a","x":{"k":1,"k":2}}`)), true, `"a"`},
		{"array", enc([]byte(`["sub"]`)), false, ""},
		{"null", enc([]byte(`null`)), false, ""},
		{"padded", base64.URLEncoding.EncodeToString([]byte(`{"a":1}`)) + "=", false, ""},
		{"not base64", "!!!", false, ""},
		{"not JSON", enc([]byte(`{sub:`)), false, ""},
	}
	for _, tc := range cases {
		m, err := DecodeSegment(tc.seg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
			continue
		}
		if tc.ok && string(m["sub"]) != tc.sub {
			t.Errorf("%s: sub = %s, want %s (exact member name)", tc.name, m["sub"], tc.sub)
		}
	}
}
