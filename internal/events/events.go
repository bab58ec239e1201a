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
	"strconv"
	"strings"
	"sync"
	"time"

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

// Defaults of a Bus.
const (
	// DefaultHistory is how many recent changes a reconnecting subscriber
	// can resume from.
	DefaultHistory = 1024
	// DefaultMaxQueue is how many undelivered changes a subscriber may have
	// before it is dropped (it reconnects and resumes or re-lists).
	DefaultMaxQueue = 1024
)

// Change is one published row (without its spec) and its position.
type Change struct {
	ID  string // "<epoch>.<seq>": the SSE event id
	seq uint64
	Pod store.WorkPod
}

// Bus fans changes out to subscribers and keeps a short history for
// resuming. The zero value is not usable; use NewBus.
type Bus struct {
	epoch    string // tells a resume from a previous process apart
	history  int
	maxQueue int

	mu   sync.Mutex
	seq  uint64
	ring []Change // the last `history` changes, oldest first
	subs map[*Sub]struct{}
}

// NewBus makes a bus with the default history and queue bounds.
func NewBus() *Bus {
	return &Bus{epoch: strconv.FormatInt(time.Now().UnixNano(), 36), history: DefaultHistory, maxQueue: DefaultMaxQueue,
		subs: map[*Sub]struct{}{}}
}

// Publish records p as the latest change and hands it to every subscriber.
// It never blocks: a subscriber too far behind is marked overflowed.
func (b *Bus) Publish(p store.WorkPod) {
	p.Spec = nil
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	c := Change{ID: b.epoch + "." + strconv.FormatUint(b.seq, 10), seq: b.seq, Pod: p}
	b.ring = append(b.ring, c)
	if len(b.ring) > b.history {
		b.ring = b.ring[len(b.ring)-b.history:]
	}
	for s := range b.subs {
		s.push(c, b.maxQueue)
	}
}

// Subscribe starts a subscription after the change lastID ("" = from now).
// reset is true when lastID cannot be resumed from (another process's, or
// older than the history): the subscriber has missed changes and should
// re-list. Close the Sub when done.
func (b *Bus) Subscribe(lastID string) (s *Sub, reset bool) {
	s = &Sub{bus: b, notify: make(chan struct{}, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if lastID != "" {
		after, ok := b.parseID(lastID)
		switch {
		case !ok || after > b.seq:
			reset = true
		case len(b.ring) > 0 && b.ring[0].seq > after+1:
			reset = true // the history no longer reaches back that far
		default:
			for _, c := range b.ring {
				if c.seq > after {
					s.queue = append(s.queue, c)
				}
			}
		}
	}
	b.subs[s] = struct{}{}
	if len(s.queue) > 0 {
		s.notify <- struct{}{}
	}
	return s, reset
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

	mu       sync.Mutex
	queue    []Change
	overflow bool
	closed   bool
}

// ErrOverflow: the subscriber fell more than the queue bound behind and was
// dropped; resume with the last id it got.
var ErrOverflow = overflowError{}

type overflowError struct{}

func (overflowError) Error() string { return "subscriber fell too far behind" }

func (s *Sub) push(c Change, max int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.overflow || s.closed {
		return
	}
	if len(s.queue) >= max {
		s.overflow, s.queue = true, nil
	} else {
		s.queue = append(s.queue, c)
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
			s.queue = s.queue[1:]
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
	s.closed, s.queue = true, nil
	s.mu.Unlock()
}
