package ingest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLRUBoundAndExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newLRU[int](2)
	c.put("a", 1, now.Add(time.Second))
	c.put("b", 2, time.Time{}) // never expires
	c.get("a", now)            // a is now the most recently used
	c.put("c", 3, time.Time{}) // evicts b
	got := map[string]bool{}
	for _, k := range []string{"a", "b", "c"} {
		_, got[k] = c.get(k, now)
	}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": false, "c": true}, got); diff != "" {
		t.Errorf("present (-want +got):\n%s", diff)
	}
	if _, ok := c.get("a", now.Add(time.Second)); ok {
		t.Error("a is live at its expiry")
	}
	if n := c.order.Len(); n != 1 {
		t.Errorf("%d entries after the expired one was read, want 1", n)
	}
}
