package api

import (
	"testing"
	"time"

	"crucible.dev/crucible/internal/store"
)

// FuzzContinue: decoding any string never panics, and whatever decodes
// encodes back to a token that decodes to the same cursor.
func FuzzContinue(f *testing.F) {
	f.Add(encodeContinue(store.Cursor{CreatedAt: time.Unix(0, 1700000000000000000), ID: "turn-abc"}))
	for _, s := range []string{"", "!!!", "MTIz", "LTEvcC0x", "OTk5OTk5OTk5OTk5OTk5OTk5OTkvcA", "MC8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := decodeContinue(tok)
		if err != nil {
			return
		}
		again, err := decodeContinue(encodeContinue(c))
		if err != nil || !again.CreatedAt.Equal(c.CreatedAt) || again.ID != c.ID {
			t.Errorf("%q: %+v re-encoded decodes to %+v, %v", tok, c, again, err)
		}
	})
}
