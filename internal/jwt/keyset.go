package jwt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/sync/singleflight"

	"crucible.dev/crucible/internal/lru"
)

// Verification outcomes other than a payload. Callers map them to answers:
// ErrUnavailable means "cannot decide now" (503, status.error, never a
// cached no); ErrUnknownKey and ErrBadSignature are definitive.
var (
	// ErrUnavailable: no keys yet, or the token's kid is unknown and the
	// latest fetch failed, or the kid is unknown but still within the
	// unknown-kid grace.
	ErrUnavailable = errors.New("signing keys unavailable")
	// ErrUnknownKey: the keys are fresh and have no key with the token's kid.
	ErrUnknownKey = errors.New("no signing key with the token's key id")
	// ErrBadSignature: a key with the token's kid (or, without a kid, every
	// key) exists and none verifies the signature.
	ErrBadSignature = errors.New("signature does not verify")
)

// FetchFunc returns the current usable keys (see UsableKeys) of one issuer.
// Fetching, TLS and metrics stay with the caller; an empty set is an error.
type FetchFunc func(ctx context.Context) ([]jose.JSONWebKey, error)

// KeySetOptions configures a KeySet. Zero values take the defaults noted.
type KeySetOptions struct {
	// Fetch reads the keys. Required.
	Fetch FetchFunc
	// MinRefresh is the least time between two fetches (default 10s): a flood
	// of unknown key ids, or an issuer that is down, costs one fetch per
	// interval.
	MinRefresh time.Duration
	// UnknownKidGrace is how long a kid absent from fresh keys is answered
	// ErrUnavailable, counted from when it was first seen, before it is
	// ErrUnknownKey (default 0: definitive at once). It covers keys published
	// through a cache that has not caught up with a rotation yet.
	UnknownKidGrace time.Duration
	// FetchTimeout bounds one fetch (default 10s).
	FetchTimeout time.Duration
	// MaxTrackedKids bounds the first-seen map of the grace (default 1024).
	MaxTrackedKids int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Seed are keys an earlier process fetched (persisted by the caller),
	// held from the start as if fetched then: a restart during an outage of
	// the issuer does not leave the set without keys. Fresh keys replace
	// them; past Seed.Expires they are never used. Nil: no seed.
	Seed *Seed
	// RefreshAfter makes a verification with keys older than it start a
	// fetch in the background (within MinRefresh), so keys still in use are
	// confirmed now and then. 0: keys are refetched only when a kid is
	// unknown. Seeded keys are always refreshed so, until a fetch succeeds.
	RefreshAfter time.Duration
}

// Seed is keys from an earlier fetch, for KeySetOptions.Seed.
type Seed struct {
	Keys      []jose.JSONWebKey
	FetchedAt time.Time // when they were fetched
	Expires   time.Time // past it they are not used
}

// Held says what keys a KeySet verifies with.
type Held struct {
	// FetchedAt is when the keys were fetched, by this process or, when
	// Seeded, by the one that persisted them.
	FetchedAt time.Time
	// Seeded: the keys are KeySetOptions.Seed; no fetch has succeeded yet.
	Seeded bool
}

// loaded is a KeySet's keys with their origin.
type loaded struct {
	keys    []jose.JSONWebKey
	held    Held
	expires time.Time // zero: never (fetched keys)
}

// Defaults of KeySetOptions.
const (
	DefaultMinRefresh     = 10 * time.Second
	DefaultFetchTimeout   = 10 * time.Second
	DefaultMaxTrackedKids = 1024
)

// KeySet caches one issuer's verification keys, modelled on go-oidc's
// RemoteKeySet with what it lacks: refetches are rate-limited (go-oidc
// refetches on every unknown kid), the last good keys survive a failed
// fetch, and "cannot decide" is distinct from "no such key". Concurrent
// refreshes are one fetch (singleflight), detached from the caller's
// cancellation so a client hanging up does not waste the one fetch the
// rate limit allows.
type KeySet struct {
	opts   KeySetOptions
	keys   atomic.Pointer[loaded] // nil until the first good fetch or a seed
	flight singleflight.Group
	// waiting counts callers waiting for a fetch (tests watch it).
	waiting atomic.Int64

	mu          sync.Mutex // guards the fields below
	lastAttempt time.Time
	lastErr     error
	// firstSeen is when each unknown key id was first seen, for the
	// unknown-kid grace; bounded, so a flood of random kids costs bounded
	// memory (an evicted id that comes back starts a new grace, which only
	// delays a definitive answer).
	firstSeen *lru.Cache[time.Time]
}

// NewKeySet returns a KeySet that fetches nothing until first needed.
func NewKeySet(opts KeySetOptions) *KeySet {
	if opts.MinRefresh <= 0 {
		opts.MinRefresh = DefaultMinRefresh
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}
	if opts.MaxTrackedKids <= 0 {
		opts.MaxTrackedKids = DefaultMaxTrackedKids
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	k := &KeySet{opts: opts, firstSeen: lru.New[time.Time](opts.MaxTrackedKids)}
	if seed := opts.Seed; seed != nil && len(seed.Keys) > 0 {
		k.keys.Store(&loaded{keys: seed.Keys, held: Held{FetchedAt: seed.FetchedAt, Seeded: true}, expires: seed.Expires})
	}
	return k
}

// current is the keys to verify with, nil when there are none or the seed
// has expired.
func (k *KeySet) current() *loaded {
	l := k.keys.Load()
	if l == nil || (!l.expires.IsZero() && !k.opts.Now().Before(l.expires)) {
		return nil
	}
	return l
}

// Held reports the origin of the keys verified with now; ok is false when
// there are none.
func (k *KeySet) Held() (held Held, ok bool) {
	l := k.current()
	if l == nil {
		return Held{}, false
	}
	return l.held, true
}

// Verify checks a compact JWS's signature and returns its payload, fetching
// the keys when there are none yet or the token's kid is unknown (within
// MinRefresh). Errors wrap ErrMalformed, ErrBadSignature, ErrUnknownKey or
// ErrUnavailable. Claims are not checked here.
func (k *KeySet) Verify(ctx context.Context, token string) ([]byte, error) {
	t, err := parseSigned(token)
	if err != nil {
		return nil, err
	}
	kid := t.kid
	if payload, err := k.verifyLoaded(t, kid); err == nil || errors.Is(err, ErrBadSignature) {
		k.confirm(ctx)
		return payload, err
	}
	refreshErr := k.refresh(ctx)
	payload, err := k.verifyLoaded(t, kid)
	if err == nil || errors.Is(err, ErrBadSignature) {
		return payload, err
	}
	return nil, k.undecided(kid, refreshErr)
}

// VerifySignature is Verify under the name go-oidc's KeySet interface (and
// so k8s.io/apiserver's JWT authenticator) calls.
func (k *KeySet) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	return k.Verify(ctx, token)
}

// VerifyLoaded is Verify without any fetch: it decides with the keys held
// now. A kid it does not know yields ErrUnavailable or ErrUnknownKey as
// Verify would after a refresh refused by the rate limit.
func (k *KeySet) VerifyLoaded(token string) ([]byte, error) {
	t, err := parseSigned(token)
	if err != nil {
		return nil, err
	}
	kid := t.kid
	payload, err := k.verifyLoaded(t, kid)
	if err == nil || errors.Is(err, ErrBadSignature) {
		return payload, err
	}
	k.mu.Lock()
	lastErr := k.lastErr
	k.mu.Unlock()
	return nil, k.undecided(kid, lastErr)
}

// Load makes sure keys are loaded: it fetches (within MinRefresh) when there
// are none, or only seeded ones, and returns an error wrapping ErrUnavailable
// while there are none.
func (k *KeySet) Load(ctx context.Context) error {
	if l := k.current(); l != nil && !l.held.Seeded {
		return nil
	}
	err := k.refresh(ctx)
	if k.current() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("not fetched yet")
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Status reports whether keys are loaded and the latest fetch error, if any
// (a set can be ready with an error: it keeps its last good keys).
func (k *KeySet) Status() (ready bool, lastErr error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.current() != nil, k.lastErr
}

// confirm starts a fetch without waiting for it when the keys just used are
// seeded or older than RefreshAfter; the rate limit still applies.
func (k *KeySet) confirm(ctx context.Context) {
	l := k.current()
	if l == nil {
		return
	}
	stale := k.opts.RefreshAfter > 0 && k.opts.Now().Sub(l.held.FetchedAt) >= k.opts.RefreshAfter
	if l.held.Seeded || stale {
		k.flight.DoChan("refresh", k.fetchOnce(ctx)) // its channel is buffered
	}
}

// verifyLoaded checks the signature with the loaded key of kid, or every
// loaded key when the token names none. errNotLoaded and errKidAbsent say
// that no key was tried.
func (k *KeySet) verifyLoaded(t signedToken, kid string) ([]byte, error) {
	l := k.current()
	if l == nil {
		return nil, errNotLoaded
	}
	tried := false
	for _, key := range l.keys {
		if kid != "" && key.KeyID != kid {
			continue
		}
		tried = true
		if key.Algorithm != "" && key.Algorithm != string(t.alg) {
			continue
		}
		if t.verify(key.Key) {
			return t.payload, nil
		}
	}
	if !tried {
		return nil, errKidAbsent
	}
	return nil, fmt.Errorf("%w: key id %q", ErrBadSignature, kid)
}

var (
	errNotLoaded = errors.New("no keys loaded")
	errKidAbsent = errors.New("key id absent")
)

// undecided is the answer for a kid the loaded keys lack after a refresh
// (attempted or refused by the rate limit) that ended with fetchErr.
func (k *KeySet) undecided(kid string, fetchErr error) error {
	if k.current() == nil {
		if fetchErr == nil {
			fetchErr = errors.New("not fetched yet")
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, fetchErr)
	}
	if fetchErr != nil {
		return fmt.Errorf("%w: key id %q unknown and the latest fetch failed: %w", ErrUnavailable, kid, fetchErr)
	}
	if k.opts.UnknownKidGrace > 0 {
		now := k.opts.Now()
		first := k.firstSeen.GetOrAdd(kid, now, func() (time.Time, time.Time) { return now, time.Time{} })
		if now.Sub(first) < k.opts.UnknownKidGrace {
			return fmt.Errorf("%w: key id %q unknown, within its grace", ErrUnavailable, kid)
		}
	}
	return fmt.Errorf("%w: %q", ErrUnknownKey, kid)
}

// refresh fetches the keys unless the last attempt is younger than
// MinRefresh. Concurrent callers share one fetch. It returns the error of
// the latest fetch (nil when it succeeded), or ErrUnavailable wrapping
// ctx's error when the caller stops waiting.
func (k *KeySet) refresh(ctx context.Context) error {
	ch := k.flight.DoChan("refresh", k.fetchOnce(ctx))
	k.waiting.Add(1)
	defer k.waiting.Add(-1)
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for a fetch: %w", ErrUnavailable, ctx.Err())
	}
}

// fetchOnce is the one fetch of a refresh, for the single flight: nothing
// when the last attempt is younger than MinRefresh, else a fetch detached
// from ctx's cancellation whose keys, when good, replace the held ones.
func (k *KeySet) fetchOnce(ctx context.Context) func() (any, error) {
	return func() (any, error) {
		k.mu.Lock()
		now := k.opts.Now()
		if !k.lastAttempt.IsZero() && now.Sub(k.lastAttempt) < k.opts.MinRefresh {
			err := k.lastErr
			k.mu.Unlock()
			return nil, err
		}
		k.lastAttempt = now
		k.mu.Unlock()

		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.opts.FetchTimeout)
		defer cancel()
		keys, err := k.opts.Fetch(fctx)
		if err == nil && len(keys) == 0 {
			err = errors.New("no usable signing keys")
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		k.lastErr = err
		if err != nil {
			return nil, err
		}
		k.keys.Store(&loaded{keys: keys, held: Held{FetchedAt: now}})
		for _, key := range keys {
			k.firstSeen.Delete(key.KeyID)
		}
		return nil, nil
	}
}
