package ingest

import (
	"strings"
	"sync"
)

// Uploads is the drop-box as the API and log collection see it: a pod
// cancelled or whose log is collected takes no more uploads, and Forget
// drops what the drop-box remembers of it (its cached accepts).
type Uploads interface{ Forget(podID string) }

// NoUploads is the Uploads of a hub without a drop-box (tests, benches).
type NoUploads struct{}

// Forget has nothing to drop.
func (NoUploads) Forget(string) {}

var (
	_ Uploads = NoUploads{}
	_ Uploads = (*Handler)(nil)
)

// Forget drops what the handler remembers of podID's uploads: its cached
// accepts. The API calls it when it cancels the pod and log collection when
// the pod's log is stored; from then on the row refuses uploads anyway, and
// a token accepted before must not outlive that in the cache.
func (h *Handler) Forget(podID string) {
	n := h.accept.DeleteFunc(func(key string) bool {
		parts := strings.Split(key, "\x00") // acceptKey: hash, pod, cluster
		return len(parts) == 3 && parts[1] == podID
	})
	if n > 0 {
		h.log.Debug("cached accepts of a closed work pod dropped", "pod", podID, "entries", n)
	}
}

// podSlots counts each pod's uploads being staged, to bound them.
type podSlots struct {
	mu sync.Mutex
	n  map[string]int
}

// acquire takes one of podID's max slots; ok is false when all are taken.
func (s *podSlots) acquire(podID string, max int) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = make(map[string]int)
	}
	if s.n[podID] >= max {
		return nil, false
	}
	s.n[podID]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.n[podID]--; s.n[podID] == 0 {
			delete(s.n, podID)
		}
	}, true
}
