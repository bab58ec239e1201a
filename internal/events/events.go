// Package events broadcasts work-pod state changes inside one controller
// process: the feed behind GET /api/events (the web UI's live rows and
// `crucible pods list --watch`).
//
// Changes are published by Store, a decorator of store.Store, so every
// writer of a row — the API's submit and cancel, the reconciler's
// transitions, finishes and lost pods, the sweep — is covered without a hook
// in each. The bus is in-process: with several replicas, a replica's
// subscribers see only the changes that replica wrote (the leader's
// reconciler writes most of them). A client that needs the whole truth
// re-lists after a reset, which the stream tells it to do whenever it may
// have missed something.
package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/store"
)

// Publisher is told about a row that changed. The no-op default is Discard.
type Publisher interface {
	Publish(p store.WorkPod)
}

// Discard publishes nowhere.
type Discard struct{}

func (Discard) Publish(store.WorkPod) {}

var (
	_ Publisher = Discard{}
	_ Publisher = (*Bus)(nil)
)

// Change is one published row (without its spec) and its position.
type Change struct {
	ID   string // "<epoch>.<seq>": the SSE event id
	seq  uint64
	cost int64 // what holding it costs, in bytes (changeCost)
	Pod  store.WorkPod
}

// changeOverhead is what a change costs beyond its row's JSON: its Change
// value in a history or a queue, roughly.
const changeOverhead = 64

// changeCost is what holding a change of p costs: its row as JSON (what the stream
// sends of it, near enough) plus changeOverhead. A row always encodes; one
// that did not would cost its string fields.
func changeCost(p store.WorkPod) int64 {
	if b, err := json.Marshal(p); err == nil {
		return int64(len(b)) + changeOverhead
	}
	return int64(len(p.ID)+len(p.Cluster)+len(p.Namespace)+len(p.Kind)+len(p.State)+len(p.PodUID)+len(p.Reason)+
		len(p.Submitter)+len(p.IdempotencyKey)+len(p.RequestSHA256)+len(p.Node)) + changeOverhead
}

// Bus fans changes out to subscribers and keeps a short history for
// resuming, both bounded in changes and in bytes ([events] history,
// history_bytes, queue, queue_bytes): a row is small, but its reason and
// waiting message come from the spoke, and a flood of changes must not
// grow the controller. The zero value is not usable; use NewBus.
type Bus struct {
	epoch  string // tells a resume from a previous process apart
	limits profile.Events

	mu        sync.Mutex
	seq       uint64
	ring      []Change // the last changes within the history bounds, oldest first
	ringBytes int64
	evicted   uint64 // the newest change dropped from the history (0: none)
	subs      map[*Sub]struct{}
}

// NewBus makes a bus bounded by the profile's [events] section. Every bound
// must be positive: a zero one would drop every subscriber at its first
// change.
func NewBus(e profile.Events) (*Bus, error) {
	for _, b := range []struct {
		key string
		v   int64
	}{{"history", int64(e.History)}, {"history_bytes", e.HistoryBytes}, {"queue", int64(e.Queue)}, {"queue_bytes", e.QueueBytes}} {
		if b.v <= 0 {
			return nil, fmt.Errorf("events bus: [events] %s is %d, must be positive", b.key, b.v)
		}
	}
	return &Bus{epoch: strconv.FormatInt(time.Now().UnixNano(), 36), limits: e, subs: map[*Sub]struct{}{}}, nil
}

// Publish records p as the latest change and hands it to every subscriber.
// It never blocks: a subscriber too far behind is marked overflowed.
func (b *Bus) Publish(p store.WorkPod) {
	p.Spec = nil
	cost := changeCost(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	c := Change{ID: b.epoch + "." + strconv.FormatUint(b.seq, 10), seq: b.seq, cost: cost, Pod: p}
	b.ring = append(b.ring, c)
	b.ringBytes += cost
	b.trim()
	for s := range b.subs {
		s.push(c, b.limits)
	}
}

// trim drops the oldest changes until the history is within both bounds.
func (b *Bus) trim() {
	n := 0
	for n < len(b.ring) && (len(b.ring)-n > b.limits.History || b.ringBytes > b.limits.HistoryBytes) {
		b.ringBytes -= b.ring[n].cost
		b.evicted = b.ring[n].seq
		n++
	}
	clear(b.ring[:n]) // the backing array must not keep a dropped row alive
	b.ring = b.ring[n:]
}

// Subscribe starts a subscription after the change lastID ("" = from now).
// reset is true when lastID cannot be resumed from (another process's,
// older than the history, or further behind than a subscriber's queue may
// be): the subscriber has missed changes and should re-list. Close the Sub
// when done.
func (b *Bus) Subscribe(lastID string) (s *Sub, reset bool) {
	s = &Sub{bus: b, notify: make(chan struct{}, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if lastID != "" {
		s.queue, s.queueBytes, reset = b.replay(lastID)
	}
	b.subs[s] = struct{}{}
	if len(s.queue) > 0 {
		s.notify <- struct{}{}
	}
	return s, reset
}

// replay is what a subscriber resuming after lastID is owed, or reset when
// that cannot be told: a replay that passes the queue's bounds is a reset
// too, as the subscriber would overflow at once and resume from the same
// id again.
func (b *Bus) replay(lastID string) (queue []Change, bytes int64, reset bool) {
	after, ok := b.parseID(lastID)
	if !ok || after > b.seq || after < b.evicted {
		return nil, 0, true
	}
	for _, c := range b.ring {
		if c.seq > after {
			queue = append(queue, c)
			bytes += c.cost
		}
	}
	if len(queue) > b.limits.Queue || bytes > b.limits.QueueBytes {
		return nil, 0, true
	}
	return queue, bytes, false
}

// parseID reads an event id of this bus's epoch.
func (b *Bus) parseID(id string) (uint64, bool) {
	epoch, seq, ok := strings.Cut(id, ".")
	if !ok || epoch != b.epoch {
		return 0, false
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	return n, err == nil
}

// Sub is one subscriber's queue.
type Sub struct {
	bus    *Bus
	notify chan struct{}

	mu         sync.Mutex
	queue      []Change
	queueBytes int64
	overflow   bool
	closed     bool
}

// ErrOverflow: the subscriber fell more than a queue bound behind and was
// dropped; resume with the last id it got.
var ErrOverflow = overflowError{}

type overflowError struct{}

func (overflowError) Error() string { return "subscriber fell too far behind" }

// push queues c, or drops the subscriber and frees its queue when c would
// take it past either bound.
func (s *Sub) push(c Change, l profile.Events) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.overflow || s.closed {
		return
	}
	if len(s.queue) >= l.Queue || s.queueBytes+c.cost > l.QueueBytes {
		s.overflow, s.queue, s.queueBytes = true, nil, 0
	} else {
		s.queue = append(s.queue, c)
		s.queueBytes += c.cost
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next waits for the next change. It returns ErrOverflow once the
// subscriber was dropped, and ctx's error when ctx ends first.
func (s *Sub) Next(ctx context.Context) (Change, error) {
	for {
		s.mu.Lock()
		switch {
		case len(s.queue) > 0:
			c := s.queue[0]
			s.queue[0] = Change{} // the backing array must not keep the row
			s.queue = s.queue[1:]
			s.queueBytes -= c.cost
			s.mu.Unlock()
			return c, nil
		case s.overflow:
			s.mu.Unlock()
			return Change{}, ErrOverflow
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Change{}, ctx.Err()
		}
	}
}

// Close ends the subscription.
func (s *Sub) Close() {
	s.bus.mu.Lock()
	delete(s.bus.subs, s)
	s.bus.mu.Unlock()
	s.mu.Lock()
	s.closed, s.queue, s.queueBytes = true, nil, 0
	s.mu.Unlock()
}
