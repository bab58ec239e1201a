package apiauth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeTokens answers TokenReviews from a map; err makes it unreachable.
type fakeTokens struct {
	mu    sync.Mutex
	users map[string]authenticationv1.UserInfo
	err   error
	calls int
}

func (f *fakeTokens) ReviewToken(_ context.Context, token string) (authenticationv1.TokenReviewStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return authenticationv1.TokenReviewStatus{}, f.err
	}
	u, ok := f.users[token]
	if !ok {
		return authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}, nil
	}
	return authenticationv1.TokenReviewStatus{Authenticated: true, User: u}, nil
}

func bearerRequest(auth ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/api/pods", nil)
	for _, a := range auth {
		r.Header.Add("Authorization", a)
	}
	return r
}

func TestBearerToken(t *testing.T) {
	tests := []struct {
		name    string
		headers []string
		want    string
		wantErr string
	}{
		{"bearer", []string{"Bearer abc.def.ghi"}, "abc.def.ghi", ""},
		{"scheme case-insensitive", []string{"bearer abc"}, "abc", ""},
		{"missing", nil, "", "unauthenticated: no bearer token (Authorization: Bearer <hub token>)"},
		{"two headers", []string{"Bearer a", "Bearer b"}, "", "unauthenticated: more than one Authorization header"},
		{"basic", []string{"Basic dXNlcjpwYXNz"}, "", "unauthenticated: Authorization is not a bearer token"},
		{"scheme only", []string{"Bearer"}, "", "unauthenticated: Authorization is not a bearer token"},
		{"empty token", []string{"Bearer "}, "", "unauthenticated: empty bearer token"},
		{"space inside", []string{"Bearer a b"}, "", "unauthenticated: bearer token has a character outside printable ASCII"},
		{"control character", []string{"Bearer a\x01b"}, "", "unauthenticated: bearer token has a character outside printable ASCII"},
		{"non-ASCII", []string{"Bearer tökén"}, "", "unauthenticated: bearer token has a character outside printable ASCII"},
		{"oversized", []string{"Bearer " + strings.Repeat("a", MaxTokenBytes+1)}, "", "unauthenticated: bearer token over 16384 bytes"},
		{"at the limit", []string{"Bearer " + strings.Repeat("a", MaxTokenBytes)}, strings.Repeat("a", MaxTokenBytes), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BearerToken(bearerRequest(tc.headers...).Header)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrUnauthenticated) {
					t.Fatalf("err = %v, want %q wrapping ErrUnauthenticated", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %.20q, %v; want %.20q", got, err, tc.want)
			}
		})
	}
}

func TestBearerCaches(t *testing.T) {
	clock := testingclock.NewFakeClock(time.Unix(1000, 0))
	rev := &fakeTokens{users: map[string]authenticationv1.UserInfo{
		"good": {Username: "alice", UID: "u1", Groups: []string{"dev"}, Extra: map[string]authenticationv1.ExtraValue{"k": {"v"}}},
	}}
	b := NewBearer(rev, 10*time.Second, 5*time.Second, 100)
	b.now = clock.Now

	id, err := b.Authenticate(bearerRequest("Bearer good"))
	want := Identity{User: "alice", UID: "u1", Groups: []string{"dev"}, Extra: map[string][]string{"k": {"v"}}}
	if err != nil || !cmp.Equal(want, id) {
		t.Fatalf("good: %+v, %v; want %+v", id, err, want)
	}
	if _, err := b.Authenticate(bearerRequest("Bearer forged")); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("forged: %v, want ErrUnauthenticated", err)
	}
	// Both answers are cached: no new reviews.
	clock.Step(4 * time.Second)
	_, _ = b.Authenticate(bearerRequest("Bearer good"))
	_, _ = b.Authenticate(bearerRequest("Bearer forged"))
	if rev.calls != 2 {
		t.Fatalf("reviews after cached repeats = %d, want 2", rev.calls)
	}
	// The rejection expires at 5s, the accept at 10s.
	clock.Step(2 * time.Second)
	_, _ = b.Authenticate(bearerRequest("Bearer good"))
	_, _ = b.Authenticate(bearerRequest("Bearer forged"))
	if rev.calls != 3 {
		t.Fatalf("reviews after the negative TTL = %d, want 3", rev.calls)
	}
	clock.Step(5 * time.Second)
	_, _ = b.Authenticate(bearerRequest("Bearer good"))
	if rev.calls != 4 {
		t.Fatalf("reviews after the accept TTL = %d, want 4", rev.calls)
	}
	// A hub outage is 503-shaped and never cached, not even as a "no".
	rev.err = errors.New("connection refused")
	clock.Step(11 * time.Second)
	for range 2 {
		if _, err := b.Authenticate(bearerRequest("Bearer good")); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("hub down: %v, want only ErrUnavailable", err)
		}
	}
	if rev.calls != 6 {
		t.Fatalf("reviews while down = %d, want 6 (errors are not cached)", rev.calls)
	}
	rev.err = nil
	if _, err := b.Authenticate(bearerRequest("Bearer good")); err != nil {
		t.Fatalf("hub back: %v", err)
	}
	// The token never reaches a review for garbled headers.
	if _, err := b.Authenticate(bearerRequest("Basic x")); !errors.Is(err, ErrUnauthenticated) || rev.calls != 7 {
		t.Fatalf("basic: %v, calls %d", err, rev.calls)
	}
}

func TestBearerAuthenticatedWithoutName(t *testing.T) {
	rev := &fakeTokens{users: map[string]authenticationv1.UserInfo{"odd": {}}}
	b := NewBearer(rev, time.Second, time.Second, 10)
	if _, err := b.Authenticate(bearerRequest("Bearer odd")); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("authenticated without a username: %v, want ErrUnauthenticated", err)
	}
}

func TestProxy(t *testing.T) {
	p := &Proxy{
		Trusted:      []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("::1/128")},
		UserHeader:   "X-Auth-Request-User",
		GroupsHeader: "X-Auth-Request-Groups",
	}
	tests := []struct {
		name    string
		peer    string
		headers map[string][]string
		want    Identity
		wantErr string
	}{
		{"trusted", "10.0.0.7:5000", map[string][]string{"X-Auth-Request-User": {"alice"}, "X-Auth-Request-Groups": {"dev, ops", "sre"}},
			Identity{User: "alice", Groups: []string{"dev", "ops", "sre"}}, ""},
		{"trusted IPv6", "[::1]:5000", map[string][]string{"X-Auth-Request-User": {"bob"}}, Identity{User: "bob"}, ""},
		{"IPv4-mapped trusted", "[::ffff:10.0.0.7]:5000", map[string][]string{"X-Auth-Request-User": {"carol"}}, Identity{User: "carol"}, ""},
		{"forged from elsewhere", "10.0.1.7:5000", map[string][]string{"X-Auth-Request-User": {"alice"}}, Identity{},
			"unauthenticated: identity headers from 10.0.1.7, which is not a trusted proxy"},
		{"forged groups only", "192.0.2.1:5000", map[string][]string{"X-Auth-Request-Groups": {"admins"}}, Identity{},
			"unauthenticated: identity headers from 192.0.2.1, which is not a trusted proxy"},
		{"X-Forwarded-For does not help", "192.0.2.1:5000", map[string][]string{"X-Forwarded-For": {"10.0.0.7"}, "X-Auth-Request-User": {"alice"}}, Identity{},
			"unauthenticated: identity headers from 192.0.2.1, which is not a trusted proxy"},
		{"bypass without headers", "192.0.2.1:5000", nil, Identity{}, "unauthenticated: requests must come through the SSO proxy"},
		{"trusted without user", "10.0.0.7:5000", nil, Identity{}, "unauthenticated: the proxy sent no single X-Auth-Request-User header"},
		{"two users", "10.0.0.7:5000", map[string][]string{"X-Auth-Request-User": {"a", "b"}}, Identity{}, "unauthenticated: the proxy sent no single X-Auth-Request-User header"},
		{"system user", "10.0.0.7:5000", map[string][]string{"X-Auth-Request-User": {"system:admin"}}, Identity{},
			"unauthenticated: X-Auth-Request-User names a reserved system: identity"},
		{"system group", "10.0.0.7:5000", map[string][]string{"X-Auth-Request-User": {"alice"}, "X-Auth-Request-Groups": {"dev,system:masters"}}, Identity{},
			"unauthenticated: X-Auth-Request-Groups names a reserved system: identity"},
		{"control character", "10.0.0.7:5000", map[string][]string{"X-Auth-Request-User": {"al\x7fice"}}, Identity{},
			"unauthenticated: control character in X-Auth-Request-User"},
		{"huge user", "10.0.0.7:5000", map[string][]string{"X-Auth-Request-User": {strings.Repeat("a", 513)}}, Identity{},
			"unauthenticated: name over 512 bytes in X-Auth-Request-User"},
		{"too many groups", "10.0.0.7:5000", map[string][]string{"X-Auth-Request-User": {"a"}, "X-Auth-Request-Groups": {strings.Repeat("g,", 257)}}, Identity{},
			"unauthenticated: more than 256 groups in X-Auth-Request-Groups"},
		{"garbled peer", "nonsense", map[string][]string{"X-Auth-Request-User": {"alice"}}, Identity{}, "unauthenticated: unknown peer address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/api/pods", nil)
			r.RemoteAddr = tc.peer
			for k, vs := range tc.headers {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			id, err := p.Authenticate(r)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrUnauthenticated) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, id); diff != "" {
				t.Errorf("identity (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeAccess allows what its allow func says and records every spec.
type fakeAccess struct {
	mu    sync.Mutex
	allow func(authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus
	err   error
	specs []authorizationv1.SubjectAccessReviewSpec
}

func (f *fakeAccess) ReviewAccess(_ context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.specs = append(f.specs, spec)
	if f.err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, f.err
	}
	return f.allow(spec), nil
}

func TestSubjectAccess(t *testing.T) {
	clock := testingclock.NewFakeClock(time.Unix(1000, 0))
	rev := &fakeAccess{allow: func(s authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: s.User == "alice" && s.ResourceAttributes.Verb == VerbGet}
	}}
	a := NewSubjectAccess(rev, "crucible", 10*time.Second, 5*time.Second, 100)
	a.now = clock.Now
	alice := Identity{User: "alice", UID: "u1", Groups: []string{"b", "a"}, Extra: map[string][]string{"x": {"2", "1"}}}
	get := Attributes{Verb: VerbGet, Subresource: SubresourceLog, Cluster: "wharf"}
	if err := a.Authorize(t.Context(), alice, get); err != nil {
		t.Fatalf("alice get: %v", err)
	}
	want := authorizationv1.SubjectAccessReviewSpec{
		User: "alice", UID: "u1", Groups: []string{"a", "b"}, Extra: map[string]authorizationv1.ExtraValue{"x": {"1", "2"}},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "crucible", Verb: "get", Group: "crucible.dev",
			Resource: "workpods", Subresource: "log", Name: "wharf"},
	}
	if diff := cmp.Diff(want, rev.specs[0]); diff != "" {
		t.Errorf("review spec (-want +got):\n%s", diff)
	}
	create := Attributes{Verb: VerbCreate, Cluster: "wharf"}
	err := a.Authorize(t.Context(), alice, create)
	if !errors.Is(err, ErrForbidden) || err.Error() != "forbidden: alice may not create workpods.crucible.dev wharf" {
		t.Fatalf("alice create: %v", err)
	}
	// Cached apart: the denial for 5s, the allow for 10s; the same identity
	// with groups in another order is the same key.
	clock.Step(4 * time.Second)
	reordered := alice
	reordered.Groups = []string{"a", "b"}
	_ = a.Authorize(t.Context(), reordered, get)
	_ = a.Authorize(t.Context(), alice, create)
	if len(rev.specs) != 2 {
		t.Fatalf("reviews = %d, want 2 (both cached)", len(rev.specs))
	}
	clock.Step(2 * time.Second)
	_ = a.Authorize(t.Context(), alice, get)
	_ = a.Authorize(t.Context(), alice, create)
	if len(rev.specs) != 3 {
		t.Fatalf("reviews after the deny TTL = %d, want 3", len(rev.specs))
	}
	// Another cluster is another question.
	_ = a.Authorize(t.Context(), alice, Attributes{Verb: VerbGet, Subresource: SubresourceLog, Cluster: "dock"})
	if len(rev.specs) != 4 {
		t.Fatalf("reviews for another cluster = %d, want 4", len(rev.specs))
	}
	// The hub down: unavailable, never a cached no.
	rev.err = errors.New("dial tcp: connection refused")
	clock.Step(time.Minute)
	for range 2 {
		if err := a.Authorize(t.Context(), alice, get); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrForbidden) {
			t.Fatalf("hub down: %v", err)
		}
	}
	rev.err = nil
	if err := a.Authorize(t.Context(), alice, get); err != nil {
		t.Fatalf("hub back: %v", err)
	}
	// An RBAC evaluation error without a decision might be transient.
	rev.allow = func(authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return authorizationv1.SubjectAccessReviewStatus{EvaluationError: "could not list rolebindings"}
	}
	if err := a.Authorize(t.Context(), Identity{User: "bob"}, get); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("evaluation error: %v, want ErrUnavailable", err)
	}
	// Denied wins over allowed.
	rev.allow = func(authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true}
	}
	if err := a.Authorize(t.Context(), Identity{User: "carol"}, get); !errors.Is(err, ErrForbidden) {
		t.Fatalf("allowed and denied: %v, want ErrForbidden", err)
	}
}

func TestAnonymous(t *testing.T) {
	id, err := Anonymous{}.Authenticate(bearerRequest("Bearer whatever"))
	if err != nil || id.User != AnonymousUser {
		t.Fatalf("= %+v, %v", id, err)
	}
	if err := (AllowAll{}).Authorize(t.Context(), id, Attributes{Verb: VerbDelete}); err != nil {
		t.Fatal(err)
	}
}
