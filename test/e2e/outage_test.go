package e2e

import (
	"net/http"
	"testing"

	"crucible.dev/crucible/internal/devstack"
)

// One spoke's API server is down: a valid token of a pod there is answered
// 503 (retry), never 401, while the other spoke's pods still upload.
func TestOneSpokeDownIs503NotUnauthorized(t *testing.T) {
	s := sharedStack(t)
	wharf, dock := s.Spoke("wharf"), s.Spoke("dock")
	client := caClient(t)
	w := workPodOn(t, s, "wharf")
	d := workPodOn(t, s, "dock")
	wTok := ingestToken(t, wharf, devstack.SpokeServiceAccount, w.ID, w.PodUID)
	dTok := ingestToken(t, dock, devstack.SpokeServiceAccount, d.ID, d.PodUID)
	restoreSpokeAfter(t, s, wharf)
	if err := s.StopAPIServer(wharf); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		code, hdr, body := upload(t, s, client, w.ID, "result", "Bearer "+wTok, "", []byte("x"))
		if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
			t.Errorf("try %d, pod on the stopped spoke: %d %s (Retry-After %q), want 503 with Retry-After", i, code, body, hdr.Get("Retry-After"))
		}
	}
	if code, _, body := upload(t, s, client, d.ID, "result", "Bearer "+dTok, "", []byte("from dock")); code != http.StatusCreated {
		t.Errorf("pod on the running spoke: %d %s, want 201", code, body)
	}
}
