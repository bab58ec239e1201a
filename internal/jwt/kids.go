package jwt

import (
	"container/list"
	"time"
)

// kidTracker remembers when each unknown key id was first seen, for the
// unknown-kid grace. It holds at most max ids and evicts the oldest first,
// so a flood of random kids costs bounded memory; an evicted id that comes
// back starts a new grace, which only delays a definitive answer. It is not
// safe for concurrent use (KeySet holds its mutex).
type kidTracker struct {
	max   int
	order *list.List // front = oldest; values are *kidEntry
	items map[string]*list.Element
}

type kidEntry struct {
	kid   string
	first time.Time
}

func newKidTracker(max int) *kidTracker {
	return &kidTracker{max: max, order: list.New(), items: map[string]*list.Element{}}
}

// seen returns when kid was first seen, recording now if it is new.
func (t *kidTracker) seen(kid string, now time.Time) time.Time {
	if el, ok := t.items[kid]; ok {
		return el.Value.(*kidEntry).first
	}
	for t.order.Len() >= t.max {
		oldest := t.order.Front()
		t.order.Remove(oldest)
		delete(t.items, oldest.Value.(*kidEntry).kid)
	}
	t.items[kid] = t.order.PushBack(&kidEntry{kid: kid, first: now})
	return now
}

// forget drops kid (its key has been published).
func (t *kidTracker) forget(kid string) {
	if el, ok := t.items[kid]; ok {
		t.order.Remove(el)
		delete(t.items, kid)
	}
}

// len is the number of tracked ids.
func (t *kidTracker) len() int { return t.order.Len() }
