package apiv1

import (
	"errors"
	"fmt"
)

// ClientHeader is the custom request header a non-browser client sends with
// every state-changing request. A browser can only send it cross-site after
// a CORS preflight, which the API never grants, so a page on another site
// cannot forge a submit or cancel (CSRF). Browsers' own same-origin requests
// are recognised by Sec-Fetch-Site instead.
const ClientHeader = "X-Crucible-Client"

// ContinueHeader carries GET /api/pods's continue token when there are more
// rows: pass it back as ?continue= for the next page. The body stays a plain
// array, so existing clients keep working and simply see the first page.
const ContinueHeader = "Crucible-Continue"

// Idempotent submits (the Idempotency-Key header of Stripe's API and of the
// IETF httpapi draft). A client that sent POST /api/pods and heard nothing
// back — the controller was killed, a proxy cut the connection — cannot
// tell whether a row was made. Sent again with the same key, the request
// answers the row the first one made (and dispatches nothing) instead of
// running the work twice as two rows.
const (
	// IdempotencyKeyHeader is the optional request header of POST /api/pods.
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader is "true" on an answer that is the row an earlier
	// request with the same key made.
	ReplayedHeader = "Idempotent-Replayed"
	// MaxIdempotencyKeyBytes bounds a key (Stripe's bound): room for a
	// UUID or a client's own composite key, not for a payload.
	MaxIdempotencyKeyBytes = 255
)

// CheckIdempotencyKey says what is wrong with key as an Idempotency-Key:
// a key is printable ASCII (space to tilde), 1 to MaxIdempotencyKeyBytes
// bytes. The CLI checks --idempotency-key with it before sending.
func CheckIdempotencyKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty; send a key or no header")
	case len(key) > MaxIdempotencyKeyBytes:
		return fmt.Errorf("%d bytes; at most %d", len(key), MaxIdempotencyKeyBytes)
	}
	for i := range len(key) {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("byte %d is not printable ASCII", i)
		}
	}
	return nil
}
