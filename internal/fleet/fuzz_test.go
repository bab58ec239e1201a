package fleet

import (
	"testing"
	"time"
)

// FuzzTokenExpiry checks that reading a token's exp never panics and only
// yields times that encode as JSON (the API shows them).
func FuzzTokenExpiry(f *testing.F) {
	f.Add([]byte(jwtWithExp(f, 1900000000)))
	f.Add([]byte("a.b.c"))
	f.Add([]byte("e30.eyJleHAiOiIxIn0.x"))
	f.Add([]byte("e30.eyJleHAiOjFlMzA4fQ.x"))
	f.Add([]byte(" e30.eyJleHAiOi0xfQ== . \n"))
	f.Fuzz(func(t *testing.T, token []byte) {
		exp, ok := tokenExpiry(token)
		if !ok {
			if !exp.IsZero() {
				t.Fatalf("not ok but exp = %v", exp)
			}
			return
		}
		if exp.Location() != time.UTC {
			t.Errorf("exp %v not in UTC", exp)
		}
		if _, err := exp.MarshalJSON(); err != nil {
			t.Errorf("exp %v does not encode: %v", exp, err)
		}
	})
}
