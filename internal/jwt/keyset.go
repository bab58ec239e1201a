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
	keys   atomic.Pointer[[]jose.JSONWebKey] // nil until the first good fetch
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
	return &KeySet{opts: opts, firstSeen: lru.New[time.Time](opts.MaxTrackedKids)}
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
// are none and returns an error wrapping ErrUnavailable while there are none.
func (k *KeySet) Load(ctx context.Context) error {
	if k.keys.Load() != nil {
		return nil
	}
	err := k.refresh(ctx)
	if k.keys.Load() != nil {
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
	return k.keys.Load() != nil, k.lastErr
}

// verifyLoaded checks the signature with the loaded key of kid, or every
// loaded key when the token names none. errNotLoaded and errKidAbsent say
// that no key was tried.
func (k *KeySet) verifyLoaded(t signedToken, kid string) ([]byte, error) {
	keys := k.keys.Load()
	if keys == nil {
		return nil, errNotLoaded
	}
	tried := false
	for _, key := range *keys {
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
	if k.keys.Load() == nil {
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
	ch := k.flight.DoChan("refresh", func() (any, error) {
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
		k.keys.Store(&keys)
		for _, key := range keys {
			k.firstSeen.Delete(key.KeyID)
		}
		return nil, nil
	})
	k.waiting.Add(1)
	defer k.waiting.Add(-1)
	select {
	case res := <-ch:
		return res.Err
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for a fetch: %w", ErrUnavailable, ctx.Err())
	}
}
