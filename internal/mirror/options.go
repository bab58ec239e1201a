package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"crucible.dev/crucible/internal/urlcheck"
)

// Options configure a Mirror. TTL and MaxStale are the profile's [mirror]
// section, whose defaults package profile applies (profile.Default().Mirror in
// tests): New refuses a zero one rather than pick a value of its own. Now
// and Logger are no profile settings; nil takes time.Now and a discarding
// logger.
type Options struct {
	// Upstream is authenticated to the hub API as the controller's service
	// account (rest.HTTPClientFor of fleet.TokenFileConfig, whose token
	// file is re-read after a 401, which fetch counts on). The mirror uses
	// a copy that never follows redirects: the token rides on every
	// request it sends.
	Upstream *http.Client
	// UpstreamURL is the hub API's base URL, e.g. https://127.0.0.1:6443.
	UpstreamURL string
	// ExternalURL is the mirror's own base URL as the spokes reach it; the
	// served discovery document's jwks_uri points below it.
	ExternalURL string
	// TTL is how long a fetched document is served as fresh ([mirror] ttl).
	TTL time.Duration
	// MaxStale is how long past its TTL the last good document is still
	// served while the hub API fails ([mirror] max_stale).
	MaxStale time.Duration
	// Now is the clock (time.Now); tests set it.
	Now func() time.Time
	// Logger receives upstream failures (discarded when nil).
	Logger *slog.Logger
	// Keeper keeps the last good documents beyond the process (the
	// controller's store); nil: in memory only.
	Keeper Keeper
}

// Keeper keeps each document as the hub API sent it, with its fetch time,
// where every replica and every restart finds it (the controller's store,
// R-TB1): a mirror that starts while the hub API is unreachable serves the
// kept documents (Restore) within max_stale counted from their fetch.
type Keeper interface {
	KeepMirrorDocument(ctx context.Context, name string, body []byte, fetchedAt time.Time) error
	// MirrorDocument is the kept document; a nil body and no error when
	// none is kept.
	MirrorDocument(ctx context.Context, name string) (body []byte, fetchedAt time.Time, err error)
}

// withDefaults returns o with its clock and logger filled in; the profile's
// durations have no fallback here (validate refuses them zero).
func (o Options) withDefaults() Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// validate reports every problem with o at once, each prefixed by its field.
func (o Options) validate() error {
	var errs []error
	if o.Upstream == nil {
		errs = append(errs, errors.New("Upstream: required")) //nolint:staticcheck // ST1005: the message starts with the field's name
	}
	if err := checkBaseURL(o.UpstreamURL, true); err != nil {
		errs = append(errs, fmt.Errorf("UpstreamURL: %w", err))
	}
	if err := checkBaseURL(o.ExternalURL, false); err != nil {
		errs = append(errs, fmt.Errorf("ExternalURL: %w", err))
	}
	if o.TTL <= 0 {
		errs = append(errs, fmt.Errorf("TTL: must be positive (the profile's mirror.ttl), got %s", o.TTL))
	}
	if o.MaxStale <= 0 {
		errs = append(errs, fmt.Errorf("MaxStale: must be positive (the profile's mirror.max_stale), got %s", o.MaxStale))
	}
	return errors.Join(errs...)
}

// checkBaseURL: see urlcheck.BaseURL. The upstream may carry a path prefix
// (API servers behind a proxy do); the external URL may not, because the
// mirror serves its two paths at the root of its listener.
func checkBaseURL(raw string, pathAllowed bool) error {
	if raw == "" {
		return errors.New("required")
	}
	if problems := urlcheck.BaseURL(raw, true, pathAllowed); len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
