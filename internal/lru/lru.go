// Package lru owns crucible's one bounded cache: a map with a per-entry
// expiry that evicts the least recently used entry when full. The drop-box
// (accepts, rejections, rate limiters) and the API's authentication (token
// and access reviews) keep security decisions in it, and the JWT key sets
// the first sighting of each unknown key id, so its bound is what keeps a
// flood of distinct keys from growing memory.
//
// Times are passed in rather than read, so callers decide with one clock and
// tests need none of their own.
package lru

import (
	"container/list"
	"sync"
	"time"
)

// Cache is safe for concurrent use; one mutex is enough at the request
// rates it serves. A zero expiry never expires.
type Cache[V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *entry[V]
	items map[string]*list.Element
}

type entry[V any] struct {
	key     string
	value   V
	expires time.Time
}

// New makes a cache of at most size entries (at least one).
func New[V any](size int) *Cache[V] {
	return &Cache[V]{max: max(size, 1), order: list.New(), items: make(map[string]*list.Element)}
}

// Get returns the live value under key. An expired entry is removed.
func (c *Cache[V]) Get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.items[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*entry[V])
	if !e.expires.IsZero() && !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.items, key)
		return zero, false
	}
	c.order.MoveToFront(el)
	return e.value, true
}

// GetOrAdd returns the live value under key, or stores and returns the one
// made by mk (with its expiry) when there is none.
func (c *Cache[V]) GetOrAdd(key string, now time.Time, mk func() (V, time.Time)) V {
	if v, ok := c.Get(key, now); ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok { // added meanwhile
		return el.Value.(*entry[V]).value
	}
	v, expires := mk()
	c.addLocked(key, v, expires)
	return v
}

// Put stores value under key until expires, replacing any earlier value.
func (c *Cache[V]) Put(key string, value V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*entry[V])
		e.value, e.expires = value, expires
		c.order.MoveToFront(el)
		return
	}
	c.addLocked(key, value, expires)
}

func (c *Cache[V]) addLocked(key string, value V, expires time.Time) {
	for c.order.Len() >= c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*entry[V]).key)
	}
	c.items[key] = c.order.PushFront(&entry[V]{key: key, value: value, expires: expires})
}

// Delete removes the entry under key, if any.
func (c *Cache[V]) Delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.Remove(el)
		delete(c.items, key)
	}
}

// DeleteFunc removes every entry whose key matches and returns how many.
func (c *Cache[V]) DeleteFunc(match func(key string) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for key, el := range c.items {
		if match(key) {
			c.order.Remove(el)
			delete(c.items, key)
			n++
		}
	}
	return n
}

// Len is the number of entries, expired ones not yet read included.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
