package capacity

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// HistoryInterval and HistorySamples make the occupancy history an hour
// long at fixed memory: a spoke's GPUs are sampled every HistoryInterval,
// and each product keeps its last HistorySamples samples.
const (
	HistoryInterval = 30 * time.Second
	HistorySamples  = 120
)

// Sample is one GPU product's occupancy on a spoke at one time.
type Sample struct {
	Time  time.Time
	Used  int64
	Total int64
}

// Series is one GPU product's samples on a spoke, oldest first.
type Series struct {
	Product string
	Samples []Sample
}

// History is the spokes' GPU occupancy over their last samples: a ring of
// fixed size per spoke and product, so that neither a long uptime nor a
// spoke's churn of products grows it past spokes × products × size.
type History struct {
	size int

	mu     sync.Mutex
	spokes map[string]map[string]*ring // by spoke, then product
}

// NewHistory keeps size samples per spoke and product.
func NewHistory(size int) *History {
	return &History{size: max(size, 1), spokes: map[string]map[string]*ring{}}
}

// Record adds cluster's GPUs per product at at. A summary not synced is no
// figure and records nothing. A product the spoke had and no longer has
// (its nodes went away) is recorded as 0 of 0, so its line falls to zero
// instead of ending at its last value; once its every sample is 0 of 0 the
// product is forgotten.
func (h *History) Record(cluster string, at time.Time, sum Summary) {
	if !sum.Synced {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	products := h.spokes[cluster]
	if products == nil {
		products = map[string]*ring{}
		h.spokes[cluster] = products
	}
	seen := make(map[string]bool, len(sum.GPUs))
	for _, g := range sum.GPUs {
		seen[g.Product] = true
		r := products[g.Product]
		if r == nil {
			r = &ring{buf: make([]Sample, 0, h.size)}
			products[g.Product] = r
		}
		r.add(Sample{Time: at, Used: g.Total - g.Free, Total: g.Total})
	}
	for product, r := range products {
		if seen[product] {
			continue
		}
		r.add(Sample{Time: at})
		if r.empty() {
			delete(products, product)
		}
	}
}

// Keep forgets every spoke not in clusters: one removed from the fleet by
// a reload, or whose capacity view was turned off.
func (h *History) Keep(clusters func(string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name := range h.spokes {
		if !clusters(name) {
			delete(h.spokes, name)
		}
	}
}

// Series is cluster's samples per product, by product; nil when nothing
// was recorded for it.
func (h *History) Series(cluster string) []Series {
	h.mu.Lock()
	defer h.mu.Unlock()
	products := h.spokes[cluster]
	if len(products) == 0 {
		return nil
	}
	out := make([]Series, 0, len(products))
	for product, r := range products {
		out = append(out, Series{Product: product, Samples: r.ordered()})
	}
	slices.SortFunc(out, func(a, b Series) int { return strings.Compare(a.Product, b.Product) })
	return out
}

// ring is the last cap(buf) samples: buf grows to its capacity, then next
// is the oldest sample, overwritten by the next add.
type ring struct {
	buf  []Sample
	next int
}

func (r *ring) add(s Sample) {
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
}

// ordered is a copy of the samples, oldest first.
func (r *ring) ordered() []Sample {
	out := make([]Sample, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// empty: every sample is 0 of 0, the product gone for the ring's length.
func (r *ring) empty() bool {
	for _, s := range r.buf {
		if s.Total != 0 {
			return false
		}
	}
	return true
}
