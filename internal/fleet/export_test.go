package fleet

import (
	"time"

	"crucible.dev/crucible/internal/profile"
)

// TokenSource is what a client's transport and health take tokens from,
// for the external tests.
type TokenSource = tokenSource

// NewRequestedTokens is the token source of an entry with token_source =
// "request" on the clock now, for tests that step time.
func NewRequestedTokens(e profile.ClusterEntry, hub *HubAccount, now func() time.Time) TokenSource {
	return newRequestedTokens(e, hub, now)
}
