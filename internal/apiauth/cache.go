package apiauth

import (
	"container/list"
	"sync"
	"time"
)

// ttlCache is a bounded map with per-entry expiry that evicts the least
// recently used entry when full. Keys are digests, never tokens.
type ttlCache[V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *cacheEntry[V]
	items map[string]*list.Element
}

type cacheEntry[V any] struct {
	key     string
	value   V
	expires time.Time
}

func newTTLCache[V any](max int) *ttlCache[V] {
	if max < 1 {
		max = 1
	}
	return &ttlCache[V]{max: max, order: list.New(), items: make(map[string]*list.Element)}
}

// get returns the live value under key; an expired entry is removed.
func (c *ttlCache[V]) get(key string, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	el, ok := c.items[key]
	if !ok {
		return zero, false
	}
	e := el.Value.(*cacheEntry[V])
	if !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.items, key)
		return zero, false
	}
	c.order.MoveToFront(el)
	return e.value, true
}

// put stores v under key until expires, evicting the least recently used
// entry when the cache is full.
func (c *ttlCache[V]) put(key string, v V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*cacheEntry[V])
		e.value, e.expires = v, expires
		c.order.MoveToFront(el)
		return
	}
	for c.order.Len() >= c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*cacheEntry[V]).key)
	}
	c.items[key] = c.order.PushFront(&cacheEntry[V]{key: key, value: v, expires: expires})
}

func (c *ttlCache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
