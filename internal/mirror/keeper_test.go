package mirror

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"crucible.dev/crucible/internal/profile"
)

// memKeeper keeps documents in memory as the store does (the newer fetch
// wins); the store's own contract is storetest's.
type memKeeper struct {
	mu   sync.Mutex
	docs map[string]keptDoc
	err  error // MirrorDocument fails with it when set
}

type keptDoc struct {
	body []byte
	at   time.Time
}

func (k *memKeeper) KeepMirrorDocument(_ context.Context, name string, body []byte, at time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.docs == nil {
		k.docs = map[string]keptDoc{}
	}
	if old, ok := k.docs[name]; !ok || old.at.Before(at) {
		k.docs[name] = keptDoc{body: append([]byte(nil), body...), at: at}
	}
	return nil
}

func (k *memKeeper) MirrorDocument(_ context.Context, name string) ([]byte, time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return nil, time.Time{}, k.err
	}
	d := k.docs[name]
	return d.body, d.at, nil
}

func (k *memKeeper) kept(name string) keptDoc {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.docs[name]
}

// A good fetch is kept as the hub sent it (its own jwks_uri, not the
// mirror's), with its fetch time; a mirror that starts later while the hub
// API fails serves the kept documents — the discovery document pointing at
// its own jwks_uri — stale within TTL plus max_stale of that fetch, and
// 503 past it, as any stale copy.
func TestKeptDocumentsServedAfterARestart(t *testing.T) {
	hub, clock, keeper := newFakeHub(t), newFakeClock(), &memKeeper{}
	first := newTestMirror(t, hub, clock, func(o *Options) { o.Keeper = keeper })
	for _, path := range []string{discoveryPath, jwksPath} {
		if r := do(t, first, http.MethodGet, path); r.status != http.StatusOK {
			t.Fatalf("first mirror, %s: %d %s", path, r.status, r.body)
		}
	}
	waitFor(t, "both documents kept", func() bool { return keeper.kept("discovery").body != nil && keeper.kept("jwks").body != nil })
	fetched := clock.Now()
	if d := keeper.kept("discovery"); string(d.body) != hubDiscovery || !d.at.Equal(fetched) {
		t.Errorf("kept discovery %q at %v, want the hub's body at %v", d.body, d.at, fetched)
	}

	hub.set(discoveryPath, down)
	hub.set(jwksPath, down)
	const otherURL = "https://other.example.com"
	second := newTestMirror(t, hub, clock, func(o *Options) { o.Keeper, o.ExternalURL = keeper, otherURL })
	if err := second.Restore(t.Context()); err != nil {
		t.Fatal(err)
	}
	d := profile.Default().Mirror
	clock.Step(d.TTL.Duration + d.MaxStale.Duration - time.Second)
	r := do(t, second, http.MethodGet, discoveryPath)
	if r.status != http.StatusOK || !strings.Contains(r.body, `"jwks_uri":"`+otherURL+jwksPath+`"`) || r.header.Get("Cache-Control") != "no-cache" {
		t.Errorf("restored discovery within max_stale: %d %q %q, want 200, stale, pointing at %s", r.status, r.header.Get("Cache-Control"), r.body, otherURL)
	}
	if r := do(t, second, http.MethodGet, jwksPath); r.status != http.StatusOK || r.body != hubJWKS {
		t.Errorf("restored jwks: %d %s", r.status, r.body)
	}
	clock.Step(2 * time.Second)
	if r := do(t, second, http.MethodGet, jwksPath); r.status != http.StatusServiceUnavailable {
		t.Errorf("restored jwks past max_stale of its fetch: %d %s, want 503", r.status, r.body)
	}
}

// Restore keeps nothing it would not serve: a kept document that does not
// prepare (an empty key set) is not restored; none kept is no error; a
// keeper that cannot be read is.
func TestRestoreRefusesBadKeptDocuments(t *testing.T) {
	hub, clock := newFakeHub(t), newFakeClock()
	hub.set(discoveryPath, down)
	hub.set(jwksPath, down)
	keeper := &memKeeper{docs: map[string]keptDoc{"jwks": {body: []byte(`{"keys":[]}`), at: clock.Now()}}}
	m := newTestMirror(t, hub, clock, func(o *Options) { o.Keeper = keeper })
	if err := m.Restore(t.Context()); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if r := do(t, m, http.MethodGet, jwksPath); r.status != http.StatusServiceUnavailable {
		t.Errorf("an empty kept key set was served: %d %s", r.status, r.body)
	}
	keeper.err = errors.New("store down")
	if err := m.Restore(t.Context()); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Errorf("restore from a keeper that fails: %v, want its error", err)
	}
}
