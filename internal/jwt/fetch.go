package jwt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// MaxDocumentBytes bounds a discovery document or key set read from a
// server: both are a few KiB; anything near this is not one.
const MaxDocumentBytes = 1 << 20

// GetJSON reads a discovery document or key set at url with client into v:
// only a 200 answer, at most MaxDocumentBytes, JSON. The drop-box (keys from
// the spokes) and the webhook (keys from the hub's mirror) both fetch
// through it; the client decides TLS, credentials and redirects.
func GetJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if len(body) > MaxDocumentBytes {
		return fmt.Errorf("GET %s: larger than %d bytes", url, MaxDocumentBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
