package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"crucible.dev/crucible/internal/api/apiv1"
	"crucible.dev/crucible/internal/apiauth"
	"crucible.dev/crucible/internal/store"
)

// submitKeyed posts body as token's user with idempotency key key.
func (f *fixture) submitKeyed(t *testing.T, token, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	return f.do(t, req{method: "POST", path: "/api/pods", token: token, body: body, header: map[string]string{apiv1.IdempotencyKeyHeader: key}})
}

func workPodOf(t *testing.T, w *httptest.ResponseRecorder) apiv1.WorkPod {
	t.Helper()
	var wp apiv1.WorkPod
	if err := json.Unmarshal(w.Body.Bytes(), &wp); err != nil {
		t.Fatalf("answer %q: %v", w.Body, err)
	}
	return wp
}

func (f *fixture) rowCount(t *testing.T) int {
	t.Helper()
	rows, err := f.st.ListWorkPods(t.Context(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// A repeat of a keyed submit — the same request, spelled with other
// spacing, key order and defaults — answers the first row exactly, marked
// replayed, and neither records nor dispatches anything.
func TestSubmitReplay(t *testing.T) {
	f := newFixture(t)
	first := f.submitKeyed(t, "tok-admin", "key-1", `{"image":"busybox","command":["true"],"env":[{"name":"A","value":"1"}]}`)
	if first.Code != http.StatusCreated || first.Header().Get(apiv1.ReplayedHeader) != "" {
		t.Fatalf("first: %d %q %s", first.Code, first.Header().Get(apiv1.ReplayedHeader), first.Body)
	}
	again := f.submitKeyed(t, "tok-admin", "key-1", `{ "env":[{"value":"1","name":"A"}], "command":["true"], "kind":"turn", "cluster":"wharf", "image":"busybox" }`)
	if again.Code != http.StatusCreated || again.Header().Get(apiv1.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %q %s", again.Code, again.Header().Get(apiv1.ReplayedHeader), again.Body)
	}
	if diff := cmp.Diff(first.Body.String(), again.Body.String()); diff != "" {
		t.Errorf("replayed body differs (-first +replay):\n%s", diff)
	}
	if ct := again.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("replay Content-Type %q", ct)
	}
	if diff := cmp.Diff([]string{"dispatch wharf"}, f.disp.called()); diff != "" {
		t.Errorf("spoke calls (-want +got):\n%s", diff)
	}
	if n := f.rowCount(t); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
	wp := workPodOf(t, again)
	row, err := f.st.GetWorkPod(t.Context(), wp.ID)
	if err != nil || row.IdempotencyKey != "key-1" || !strings.HasPrefix(row.RequestSHA256, "hmac-sha256:") || len(row.RequestSHA256) != len("hmac-sha256:")+64 {
		t.Errorf("row %s: key %q digest %q, %v", wp.ID, row.IdempotencyKey, row.RequestSHA256, err)
	}
	// Without a key, the same request is a new work pod, as always.
	for range 2 {
		if w := f.do(t, req{method: "POST", path: "/api/pods", token: "tok-admin", body: `{"image":"busybox","command":["true"]}`}); w.Code != http.StatusCreated {
			t.Fatalf("unkeyed: %d %s", w.Code, w.Body)
		}
	}
	if n := f.rowCount(t); n != 3 {
		t.Errorf("%d rows after two unkeyed submits, want 3", n)
	}
}

// The same key with another request is refused with 422 naming the header
// and the row, and changes nothing.
func TestSubmitKeyMismatch(t *testing.T) {
	f := newFixture(t)
	first := f.submitKeyed(t, "tok-admin", "key-1", `{"image":"busybox","command":["true"]}`)
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	id := workPodOf(t, first).ID
	for name, body := range map[string]string{
		"other command": `{"image":"busybox","command":["false"]}`,
		"other cluster": `{"image":"busybox","command":["true"],"cluster":"dock"}`,
		"other kind":    `{"image":"busybox","command":["true"],"kind":"loop"}`,
		"secret value":  `{"image":"busybox","command":["true"],"secret_files":{"k":"v"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			w := f.submitKeyed(t, "tok-admin", "key-1", body)
			if w.Code != http.StatusUnprocessableEntity || w.Header().Get(apiv1.ReplayedHeader) != "" {
				t.Fatalf("reuse: %d %s", w.Code, w.Body)
			}
			e := errorBodyOf(t, w)
			want := "Idempotency-Key was used for work pod " + id + " with a different request; repeat that request, or use a new key for a new one"
			if e.Error != want || e.Field != apiv1.IdempotencyKeyHeader {
				t.Errorf("error %q field %q,\nwant  %q", e.Error, e.Field, want)
			}
		})
	}
	if n, calls := f.rowCount(t), f.disp.called(); n != 1 || len(calls) != 1 {
		t.Errorf("%d rows, spoke calls %v; want 1 row, 1 dispatch", n, calls)
	}
}

// A key is its submitter's: another user with the same key makes a row of
// their own, and each replays only their own.
func TestSubmitKeyPerSubmitter(t *testing.T) {
	f := newFixture(t)
	body := `{"image":"busybox"}`
	admins := workPodOf(t, f.submitKeyed(t, "tok-admin", "shared", body))
	w := f.submitKeyed(t, "tok-submitter", "shared", body)
	if w.Code != http.StatusCreated || w.Header().Get(apiv1.ReplayedHeader) != "" {
		t.Fatalf("other user's first submit: %d %q %s", w.Code, w.Header().Get(apiv1.ReplayedHeader), w.Body)
	}
	theirs := workPodOf(t, w)
	if theirs.ID == admins.ID || theirs.Submitter != "submitter" {
		t.Fatalf("other user got %s (%s), admin's is %s", theirs.ID, theirs.Submitter, admins.ID)
	}
	// A different body under the other user's key is their own mismatch,
	// naming their own row, never admin's.
	w = f.submitKeyed(t, "tok-submitter", "shared", `{"image":"alpine"}`)
	if e := errorBodyOf(t, w); w.Code != http.StatusUnprocessableEntity || strings.Contains(e.Error, admins.ID) || !strings.Contains(e.Error, theirs.ID) {
		t.Errorf("other user's mismatch: %d %s", w.Code, w.Body)
	}
	for token, want := range map[string]string{"tok-admin": admins.ID, "tok-submitter": theirs.ID} {
		w := f.submitKeyed(t, token, "shared", body)
		if got := workPodOf(t, w); w.Header().Get(apiv1.ReplayedHeader) != "true" || got.ID != want {
			t.Errorf("%s replay: %s (replayed %q), want %s", token, got.ID, w.Header().Get(apiv1.ReplayedHeader), want)
		}
	}
	if n := len(f.disp.called()); n != 2 {
		t.Errorf("%d dispatches, want 2", n)
	}
}

// A replay while the first request's dispatch is still in flight answers
// the row as it is (pending) and never dispatches a second time.
func TestSubmitReplayWhileDispatching(t *testing.T) {
	f := newFixture(t)
	f.disp.hold = make(chan struct{})
	body := `{"image":"busybox"}`
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.submitKeyed(t, "tok-admin", "slow", body) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(f.disp.called()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first submit never reached the spoke")
		}
		time.Sleep(5 * time.Millisecond)
	}
	w := f.submitKeyed(t, "tok-admin", "slow", body)
	close(f.disp.hold)
	first := <-done
	if w.Code != http.StatusCreated || w.Header().Get(apiv1.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %s", w.Code, w.Body)
	}
	pending, dispatched := workPodOf(t, w), workPodOf(t, first)
	if pending.State != store.StatePending || pending.ID != dispatched.ID || dispatched.State != store.StateDispatched {
		t.Errorf("replay %s %s, first %s %s; want the same row pending, then dispatched", pending.ID, pending.State, dispatched.ID, dispatched.State)
	}
	if n := len(f.disp.called()); n != 1 {
		t.Errorf("%d dispatches, want 1", n)
	}
}

// A replay of a submit whose dispatch failed answers the failed row (its
// reason says why) and does not dispatch again: a new key is a new try.
func TestSubmitReplayOfFailedDispatch(t *testing.T) {
	f := newFixture(t)
	f.disp.dispatchErr = errorString(internalDetail)
	body := `{"image":"busybox"}`
	if w := f.submitKeyed(t, "tok-admin", "k", body); w.Code != http.StatusBadGateway {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	w := f.submitKeyed(t, "tok-admin", "k", body)
	wp := workPodOf(t, w)
	if w.Code != http.StatusCreated || w.Header().Get(apiv1.ReplayedHeader) != "true" || wp.State != store.StateFailed ||
		wp.Reason != "dispatch: the call to the spoke failed (the controller's log has the cause)" {
		t.Errorf("replay: %d %s", w.Code, w.Body)
	}
	if n := len(f.disp.called()); n != 1 {
		t.Errorf("%d dispatches, want 1", n)
	}
}

// Every malformed key is a 400 naming the header, before anything is
// recorded or dispatched; the longest allowed key and every printable
// ASCII character are accepted.
func TestSubmitKeyRefusals(t *testing.T) {
	printable := make([]byte, 0, 95)
	for c := byte(0x20); c <= 0x7e; c++ {
		printable = append(printable, c)
	}
	tests := []struct {
		name   string
		values []string
		want   string // "" accepted
	}{
		{"empty", []string{""}, "Idempotency-Key: empty; send a key or no header"},
		{"twice", []string{"a", "b"}, "Idempotency-Key: sent 2 times; send one key"},
		{"twice the same", []string{"a", "a"}, "Idempotency-Key: sent 2 times; send one key"},
		{"oversized", []string{strings.Repeat("k", apiv1.MaxIdempotencyKeyBytes+1)}, "Idempotency-Key: 256 bytes; at most 255"},
		{"huge", []string{strings.Repeat("k", 64<<10)}, "Idempotency-Key: 65536 bytes; at most 255"},
		{"unicode", []string{"ключ"}, "Idempotency-Key: byte 0 is not printable ASCII"},
		{"tab", []string{"a\tb"}, "Idempotency-Key: byte 1 is not printable ASCII"},
		{"NUL", []string{"ab\x00"}, "Idempotency-Key: byte 2 is not printable ASCII"},
		{"DEL", []string{"\x7f"}, "Idempotency-Key: byte 0 is not printable ASCII"},
		{"longest", []string{strings.Repeat("k", apiv1.MaxIdempotencyKeyBytes)}, ""},
		{"every printable byte", []string{string(printable)}, ""},
		{"IETF sf-string", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			r := httptest.NewRequest("POST", "http://127.0.0.1:8080/api/pods", strings.NewReader(`{"image":"busybox"}`))
			r.Header.Set("Authorization", "Bearer tok-admin")
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set(apiv1.ClientHeader, "test")
			for _, v := range tc.values {
				r.Header.Add(apiv1.IdempotencyKeyHeader, v)
			}
			w := httptest.NewRecorder()
			f.mux.ServeHTTP(w, r)
			if tc.want == "" {
				if w.Code != http.StatusCreated {
					t.Fatalf("%d %s, want 201", w.Code, w.Body)
				}
				row, err := f.st.GetWorkPod(t.Context(), workPodOf(t, w).ID)
				if err != nil || row.IdempotencyKey != tc.values[0] {
					t.Errorf("stored key %q, %v", row.IdempotencyKey, err)
				}
				return
			}
			e := errorBodyOf(t, w)
			if w.Code != http.StatusBadRequest || e.Error != tc.want || e.Field != apiv1.IdempotencyKeyHeader {
				t.Errorf("%d %q field %q,\nwant 400 %q field %s", w.Code, e.Error, e.Field, tc.want, apiv1.IdempotencyKeyHeader)
			}
			if n, calls := f.rowCount(t), f.disp.called(); n != 0 || len(calls) != 0 {
				t.Errorf("refused, yet %d rows and spoke calls %v", n, calls)
			}
		})
	}
}

// FuzzIdempotencyKey: a key is accepted exactly when it is 1 to 255 bytes
// of printable ASCII, and a refusal is always a 400 naming the header.
func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{"", "a", "key-1", "ключ", "a\tb", "\x00", strings.Repeat("k", 256), `"quoted"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		r := httptest.NewRequest("POST", "http://127.0.0.1:8080/api/pods", nil)
		r.Header[apiv1.IdempotencyKeyHeader] = []string{key}
		got, err := idempotencyKey(r)
		valid := len(key) >= 1 && len(key) <= apiv1.MaxIdempotencyKeyBytes && !strings.ContainsFunc(key, func(c rune) bool { return c < 0x20 || c > 0x7e })
		switch {
		case valid && (err != nil || got != key):
			t.Fatalf("%q refused: %v", key, err)
		case !valid && err == nil:
			t.Fatalf("%q accepted", key)
		case !valid && !strings.Contains(err.Error(), "400 Idempotency-Key: "):
			t.Fatalf("%q: %v", key, err)
		}
	})
}

// cutSubmit records the row a keyed submit of body by admin makes, as a
// controller stopped before its dispatch leaves it: persisted, pending,
// never dispatched.
func (f *fixture) cutSubmit(t *testing.T, key, body string) store.WorkPod {
	t.Helper()
	var sr apiv1.SubmitRequest
	if err := json.Unmarshal([]byte(body), &sr); err != nil {
		t.Fatal(err)
	}
	digestKey, err := f.st.DigestKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	sub, err := newSubmission(f.srv.Profile.Load(), sr, apiauth.Identity{User: "admin"}, key, digestKey, newID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.CreateWorkPod(t.Context(), sub.row); err != nil {
		t.Fatal(err)
	}
	row, err := f.st.GetWorkPod(t.Context(), sub.row.ID)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// afterDispatchTimeout shortens the server's dispatch timeout and waits
// until row is older than it: its first dispatch is over.
func (f *fixture) afterDispatchTimeout(row store.WorkPod) {
	f.srv.DispatchTimeout = 50 * time.Millisecond
	time.Sleep(time.Until(row.CreatedAt.Add(f.srv.DispatchTimeout)))
}

// A replay of a submit cut before its dispatch dispatches the row once that
// dispatch's time is over — with the secret files the replay carries and
// the store never kept — and answers it dispatched; before then it answers
// the row pending and dispatches nothing (the first dispatch may still be
// running); a replay whose dispatch fails fails the row, saying why.
func TestSubmitReplayDispatchesACutSubmit(t *testing.T) {
	body := `{"image":"busybox","secret_files":{"token":"s3cret"}}`
	t.Run("within the dispatch timeout", func(t *testing.T) {
		f := newFixture(t)
		row := f.cutSubmit(t, "k", body)
		w := f.submitKeyed(t, "tok-admin", "k", body)
		if wp := workPodOf(t, w); w.Code != http.StatusCreated || wp.ID != row.ID || wp.State != store.StatePending {
			t.Errorf("replay: %d %s, want 201 with %s pending", w.Code, w.Body, row.ID)
		}
		if calls := f.disp.called(); len(calls) != 0 {
			t.Errorf("dispatched %v while the first dispatch may be running", calls)
		}
	})
	t.Run("after it", func(t *testing.T) {
		f := newFixture(t)
		row := f.cutSubmit(t, "k", body)
		f.afterDispatchTimeout(row)
		w := f.submitKeyed(t, "tok-admin", "k", body)
		wp := workPodOf(t, w)
		if w.Code != http.StatusCreated || w.Header().Get(apiv1.ReplayedHeader) != "true" || wp.ID != row.ID ||
			wp.State != store.StateDispatched || wp.PodUID != "uid-"+row.ID || !slices.Equal(wp.SecretFileNames, []string{"token"}) {
			t.Fatalf("replay: %d %s, want 201 with %s dispatched", w.Code, w.Body, row.ID)
		}
		if len(f.disp.dispatched) != 1 || f.disp.dispatched[0].ID != row.ID || f.disp.dispatched[0].SecretFiles["token"] != "s3cret" {
			t.Errorf("dispatched %+v, want %s once with its secret file", f.disp.dispatched, row.ID)
		}
		// Dispatched now, a further replay answers the row as it is.
		if w := f.submitKeyed(t, "tok-admin", "k", body); workPodOf(t, w).State != store.StateDispatched || len(f.disp.called()) != 1 {
			t.Errorf("second replay: %d %s after %d dispatches, want the row dispatched, one dispatch", w.Code, w.Body, len(f.disp.called()))
		}
	})
	t.Run("its dispatch fails", func(t *testing.T) {
		f := newFixture(t)
		f.disp.dispatchErr = errorString(internalDetail)
		row := f.cutSubmit(t, "k", body)
		f.afterDispatchTimeout(row)
		if w := f.submitKeyed(t, "tok-admin", "k", body); w.Code != http.StatusBadGateway || strings.Contains(w.Body.String(), internalDetail) {
			t.Errorf("replay: %d %s, want 502 without the internal detail", w.Code, w.Body)
		}
		got, err := f.st.GetWorkPod(t.Context(), row.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.StateFailed || !strings.HasPrefix(got.Reason, "dispatch: ") {
			t.Errorf("row %s %q, want failed with the dispatch's reason", got.State, got.Reason)
		}
	})
	t.Run("another request under the key", func(t *testing.T) {
		f := newFixture(t)
		f.afterDispatchTimeout(f.cutSubmit(t, "k", body))
		if w := f.submitKeyed(t, "tok-admin", "k", `{"image":"busybox","secret_files":{"token":"other"}}`); w.Code != http.StatusUnprocessableEntity {
			t.Errorf("replay with other secrets: %d %s, want 422", w.Code, w.Body)
		}
		if calls := f.disp.called(); len(calls) != 0 {
			t.Errorf("dispatched %v for a request the key did not make", calls)
		}
	})
}

// A keyed submit's row keeps the request's HMAC under the store's digest
// key, never its bare SHA-256 (which a reader of the store could test
// guesses of a short secret file against); a row written before the key,
// with the bare SHA-256, still replays its own request and still refuses
// another one.
func TestSubmitDigestKeyed(t *testing.T) {
	f := newFixture(t)
	const body = `{"image":"busybox","command":["true"],"secret_files":{"pin":"1234"}}`
	// As dispatched: the default kind and cluster filled in.
	canonical, err := json.Marshal(apiv1.SubmitRequest{Kind: "turn", Cluster: "wharf", Image: "busybox", Command: []string{"true"}, SecretFiles: map[string]string{"pin": "1234"}})
	if err != nil {
		t.Fatal(err)
	}
	bare := sha256.Sum256(canonical)
	key, err := f.st.DigestKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write(canonical)
	keyed := "hmac-sha256:" + hex.EncodeToString(m.Sum(nil))

	if w := f.submitKeyed(t, "tok-admin", "new", body); w.Code != http.StatusCreated {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	row, err := f.st.GetWorkPodByKey(t.Context(), "admin", "new")
	if err != nil {
		t.Fatal(err)
	}
	if row.RequestSHA256 != keyed {
		t.Errorf("request digest %q, want the HMAC %q (bare SHA-256 %x)", row.RequestSHA256, keyed, bare)
	}
	if strings.Contains(string(row.Spec), "1234") || strings.Contains(string(row.Spec), hex.EncodeToString(bare[:])) {
		t.Errorf("row spec %s holds the secret or a bare digest", row.Spec)
	}

	old := store.WorkPod{ID: "turn-old", Cluster: "wharf", Namespace: "loops", Kind: "turn", State: store.StateSucceeded,
		Submitter: "admin", IdempotencyKey: "old", RequestSHA256: hex.EncodeToString(bare[:])}
	if _, err := f.st.CreateWorkPod(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	again := f.submitKeyed(t, "tok-admin", "old", body)
	if again.Code != http.StatusCreated || again.Header().Get(apiv1.ReplayedHeader) != "true" || workPodOf(t, again).ID != "turn-old" {
		t.Fatalf("replay of a bare-SHA-256 row: %d %q %s", again.Code, again.Header().Get(apiv1.ReplayedHeader), again.Body)
	}
	other := f.submitKeyed(t, "tok-admin", "old", `{"image":"busybox","command":["true"],"secret_files":{"pin":"1235"}}`)
	if other.Code != http.StatusUnprocessableEntity {
		t.Fatalf("another request with a bare-SHA-256 row's key: %d %s, want 422", other.Code, other.Body)
	}
}

// A store that cannot give the digest key right now makes a submit 503,
// records nothing, and the next submit reads the key once it can.
func TestSubmitDigestKeyUnavailable(t *testing.T) {
	f := newFixture(t)
	f.st.Fail(fmt.Errorf("read: %w", syscall.ECONNREFUSED), "DigestKey")
	if w := f.submitKeyed(t, "tok-admin", "k", `{"image":"busybox"}`); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("submit without the digest key: %d %s, want 503", w.Code, w.Body)
	}
	if n := f.rowCount(t); n != 0 {
		t.Errorf("%d rows recorded without the digest key", n)
	}
	f.st.Fail(nil)
	if w := f.submitKeyed(t, "tok-admin", "k", `{"image":"busybox"}`); w.Code != http.StatusCreated {
		t.Fatalf("submit once the key is readable: %d %s", w.Code, w.Body)
	}
}
