package lru

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBoundAndExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New[int](2)
	c.Put("a", 1, now.Add(time.Second))
	c.Put("b", 2, time.Time{}) // never expires
	c.Get("a", now)            // a is now the most recently used
	c.Put("c", 3, time.Time{}) // evicts b
	got := map[string]bool{}
	for _, k := range []string{"a", "b", "c"} {
		_, got[k] = c.Get(k, now)
	}
	if diff := cmp.Diff(map[string]bool{"a": true, "b": false, "c": true}, got); diff != "" {
		t.Errorf("present (-want +got):\n%s", diff)
	}
	if _, ok := c.Get("a", now.Add(time.Second)); ok {
		t.Error("a is live at its expiry")
	}
	if n := c.Len(); n != 1 {
		t.Errorf("%d entries after the expired one was read, want 1", n)
	}
}

func TestPutReplacesAndRefreshes(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New[string](2)
	c.Put("a", "old", now.Add(time.Second))
	c.Put("b", "b", time.Time{})
	c.Put("a", "new", now.Add(time.Hour)) // a is most recent again, with a new expiry
	c.Put("c", "c", time.Time{})          // evicts b
	if v, ok := c.Get("a", now.Add(time.Minute)); !ok || v != "new" {
		t.Errorf("a = %q, %v; want new, live", v, ok)
	}
	if _, ok := c.Get("b", now); ok {
		t.Error("b survived eviction")
	}
}

func TestGetOrAddMakesOnce(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New[*int](10)
	made := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			c.GetOrAdd("k", now, func() (*int, time.Time) {
				mu.Lock()
				defer mu.Unlock()
				made++
				v := made
				return &v, time.Time{}
			})
		})
	}
	wg.Wait()
	if made != 1 {
		t.Errorf("made %d values for one key, want 1", made)
	}
}

func TestDeleteFunc(t *testing.T) {
	c := New[int](10)
	for i := range 6 {
		c.Put(fmt.Sprintf("pod-%d/%d", i%2, i), i, time.Time{})
	}
	if n := c.DeleteFunc(func(k string) bool { return k[:5] == "pod-1" }); n != 3 {
		t.Errorf("deleted %d, want 3", n)
	}
	if n := c.Len(); n != 3 {
		t.Errorf("%d left, want 3", n)
	}
}

func TestAtLeastOne(t *testing.T) {
	c := New[int](0)
	c.Put("a", 1, time.Time{})
	if _, ok := c.Get("a", time.Now()); !ok {
		t.Error("a cache made with max 0 holds nothing")
	}
}

func TestDelete(t *testing.T) {
	c := New[int](2)
	now := time.Now()
	c.Put("a", 1, time.Time{})
	c.Put("b", 2, time.Time{})
	c.Delete("a")
	c.Delete("missing")
	if _, ok := c.Get("a", now); ok {
		t.Error("a is still there after Delete")
	}
	if v, ok := c.Get("b", now); !ok || v != 2 || c.Len() != 1 {
		t.Errorf("b = %d, %t with %d entries; want 2 and one entry", v, ok, c.Len())
	}
}
