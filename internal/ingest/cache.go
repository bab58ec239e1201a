package ingest

import (
	"container/list"
	"sync"
	"time"
)

// lru is a bounded map with per-entry expiry that evicts the least recently
// used entry when full. A zero expiry never expires. It is safe for
// concurrent use; one mutex is enough at the drop-box's request rates.
type lru[V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *lruEntry[V]
	items map[string]*list.Element
}

type lruEntry[V any] struct {
	key     string
	value   V
	expires time.Time
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, order: list.New(), items: make(map[string]*list.Element)}
}

// get returns the live value under key. An expired entry is removed.
func (c *lru[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.items[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*lruEntry[V])
	if !e.expires.IsZero() && !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.items, key)
		return zero, false
	}
	c.order.MoveToFront(el)
	return e.value, true
}

// getOrAdd returns the live value under key, or stores and returns the one
// made by mk when there is none.
func (c *lru[V]) getOrAdd(key string, now time.Time, mk func() (V, time.Time)) V {
	if v, ok := c.get(key, now); ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok { // added meanwhile
		return el.Value.(*lruEntry[V]).value
	}
	v, expires := mk()
	c.addLocked(key, v, expires)
	return v
}

// put stores value under key until expires, replacing any earlier value.
func (c *lru[V]) put(key string, value V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*lruEntry[V])
		e.value, e.expires = value, expires
		c.order.MoveToFront(el)
		return
	}
	c.addLocked(key, value, expires)
}

func (c *lru[V]) addLocked(key string, value V, expires time.Time) {
	for c.order.Len() >= c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*lruEntry[V]).key)
	}
	c.items[key] = c.order.PushFront(&lruEntry[V]{key: key, value: value, expires: expires})
}

// keyedMutex serialises work per key (here: per pod and artifact kind)
// without keeping a mutex per key forever.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*refMutex
}

type refMutex struct {
	sync.Mutex
	refs int
}

// lock locks key and returns its unlock function.
func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[string]*refMutex)
	}
	m, ok := k.locks[key]
	if !ok {
		m = &refMutex{}
		k.locks[key] = m
	}
	m.refs++
	k.mu.Unlock()
	m.Lock()
	return func() {
		m.Unlock()
		k.mu.Lock()
		if m.refs--; m.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
