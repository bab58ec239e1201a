package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"crucible.dev/crucible/internal/jwt"
	"crucible.dev/crucible/internal/retry"

	"crucible.dev/crucible/internal/profile"
)

// A spoke entry with token_source = "request" has no token file: a projected
// volume cannot be added to a running pod, so a spoke added to a running
// controller gets its token from the hub's TokenRequest API instead. The
// controller asks for its own service account with the spoke's audience —
// the same token the kubelet would project — keeps it in memory only and
// renews it at 80 % of its life, as the kubelet does.

// Timing of the requested tokens. None is a profile key: they bound how
// hard the controller leans on the hub, not what the operator chooses.
const (
	// tokenRequestTimeout bounds one TokenRequest.
	tokenRequestTimeout = 10 * time.Second
	// tokenLeeway: a token this close to its expiry is not handed out, so
	// that it does not expire on the way to the spoke.
	tokenLeeway = 10 * time.Second
	// tokenRenewSpacing is the least time between two TokenRequests of one
	// cluster: a spoke that answers every token with 401 (its webhook
	// misconfigured) costs the hub one TokenRequest a second, not one per
	// request.
	tokenRenewSpacing = time.Second
	// After a failed TokenRequest the next waits tokenRetryInitial,
	// doubling up to tokenRetryMax; meanwhile a still-valid token is used
	// and, without one, the last error returned at once.
	tokenRetryInitial = time.Second
	tokenRetryMax     = 30 * time.Second
)

// ErrTokenRequest is matched (errors.Is) by every failure to get a spoke's
// token from the hub's TokenRequest API.
var ErrTokenRequest = errors.New("no token from the hub's TokenRequest API")

// tokenRequestError is a failed TokenRequest for one cluster. Its text names
// the cluster and, for a refusal, what the hub's RBAC lacks. It does not
// wrap the hub's API status: a caller of the spoke must not take the hub's
// 403 or 404 for the spoke's own answer (a pod "not found", RBAC of
// `render spoke` missing).
type tokenRequestError struct {
	msg string
	// refused: the hub answered and will answer the same until its RBAC or
	// the service account changes. The cluster's client fails closed: no
	// token, and the error is permanent for retry.IsTransient.
	refused bool
}

func (e *tokenRequestError) Error() string { return e.msg }

// Is makes every tokenRequestError match ErrTokenRequest.
func (e *tokenRequestError) Is(target error) bool { return target == ErrTokenRequest }

// Permanent tells retry.IsTransient not to retry a refusal; any other
// failure arrives inside the *url.Error of the spoke request, which it
// retries as a network error.
func (e *tokenRequestError) Permanent() bool { return e.refused }

// tokenCreator is the TokenRequest API of the hub account's namespace
// (client-go's ServiceAccountInterface).
type tokenCreator interface {
	CreateToken(ctx context.Context, name string, req *authenticationv1.TokenRequest, opts metav1.CreateOptions) (*authenticationv1.TokenRequest, error)
}

// HubAccount is the controller's own service account on the hub, which
// entries with token_source = "request" ask for their tokens. The hub RBAC
// that takes is create on serviceaccounts/token for this one name in its
// namespace (`crucible render hub --token-request`): the controller can
// mint tokens for itself, no one else.
type HubAccount struct {
	Namespace, Name string
	// Pod is the controller's own pod when its hub token is a pod's
	// projected token (its kubernetes.io.pod claims): every requested
	// token is bound to it (boundObjectRef), so a leaked one dies with the
	// pod rather than living out its lifetime. Zero outside a pod (a hub
	// token_file of another kind): the tokens are bound to nothing.
	Pod BoundPod

	tokens tokenCreator
	// server answers /readyz, which tells a hub that has just started
	// (and denies everything until its RBAC has loaded) from a real RBAC
	// gap (retry.NotReady).
	server rest.Interface
}

// NewHubAccount is the service account the token in tokenFile belongs to —
// the controller's hub token: in a cluster the pod's own, outside one
// [hub] token_file — asking for tokens through hub. The account is read
// from the token's sub claim (system:serviceaccount:NS:NAME) rather than
// from a profile key: the identity the hub authenticates the
// TokenRequest as is the one the request must name, so nothing can
// disagree with it. The token is not verified here (the hub does that on
// every request) and never leaves this function.
func NewHubAccount(hub kubernetes.Interface, tokenFile string) (*HubAccount, error) {
	raw, err := readToken(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("hub token %s: %w", tokenFile, err)
	}
	tok, err := jwt.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("hub token %s: token_source = \"request\" needs the controller's hub identity to be a service account, and this is not a service-account token: %w", tokenFile, err)
	}
	ns, name, err := serviceaccount.SplitUsername(tok.Claims.Subject)
	if err != nil {
		return nil, fmt.Errorf("hub token %s: token_source = \"request\" needs the controller's hub identity to be a service account, and the token's subject %q is not system:serviceaccount:<namespace>:<name>", tokenFile, tok.Claims.Subject)
	}
	pod, err := boundPod(raw)
	if err != nil {
		return nil, fmt.Errorf("hub token %s: %w", tokenFile, err)
	}
	return &HubAccount{Namespace: ns, Name: name, Pod: pod, tokens: hub.CoreV1().ServiceAccounts(ns), server: hub.Discovery().RESTClient()}, nil
}

// BoundPod names the pod a projected service-account token is bound to.
type BoundPod struct{ Name, UID string }

// boundPod reads the kubernetes.io.pod claim of a token jwt.Parse took:
// zero when there is none, an error when it is there but malformed (a pod
// with a name and no uid cannot be bound to).
func boundPod(token string) (BoundPod, error) {
	_, rest, _ := strings.Cut(token, ".")
	payload, _, _ := strings.Cut(rest, ".")
	members, err := jwt.DecodeSegment(payload)
	if err != nil {
		return BoundPod{}, fmt.Errorf("read its claims: %w", err)
	}
	raw, ok := members["kubernetes.io"]
	if !ok {
		return BoundPod{}, nil
	}
	var claim struct {
		Pod *struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	}
	if err := json.Unmarshal(raw, &claim); err != nil {
		return BoundPod{}, fmt.Errorf("its kubernetes.io claim: %w", err)
	}
	if claim.Pod == nil {
		return BoundPod{}, nil
	}
	if claim.Pod.Name == "" || claim.Pod.UID == "" {
		return BoundPod{}, fmt.Errorf("its kubernetes.io.pod claim has name %q and uid %q; a bound pod has both", claim.Pod.Name, claim.Pod.UID)
	}
	return BoundPod{Name: claim.Pod.Name, UID: claim.Pod.UID}, nil
}

// boundObjectRef binds a requested token to the controller's pod, or to
// nothing outside one.
func (h *HubAccount) boundObjectRef() *authenticationv1.BoundObjectReference {
	if h.Pod.Name == "" {
		return nil
	}
	return &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: h.Pod.Name, UID: types.UID(h.Pod.UID)}
}

// readToken reads a token file of at most jwt.MaxTokenBytes.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, jwt.MaxTokenBytes+1))
	if err != nil {
		return "", err
	}
	if len(data) > jwt.MaxTokenBytes {
		return "", fmt.Errorf("larger than %d bytes", jwt.MaxTokenBytes)
	}
	return strings.TrimSpace(string(data)), nil
}

// requestedTokens is the token source of an entry with token_source =
// "request": the client's transport takes every request's token from it,
// and a 401 resets it (transport.ResettableTokenSource).
//
// A token is fresh until 80 % of the life the hub granted
// (status.expirationTimestamp, counted from when it was asked for); past
// that the next caller starts a renewal and keeps using the still-valid
// token meanwhile, so no request waits for the hub while there is one.
// After a 401 the next caller waits for a new token. A hub that fails
// (5xx, timeout, unreachable) leaves the old token in use while it is
// valid, and is asked again after a backoff; a hub that refuses (403, 404,
// any other answer but 401 and 429) drops the token: the cluster's client
// fails closed, with an error that names the missing RBAC.
type requestedTokens struct {
	cluster, audience string
	seconds           int64
	hub               *HubAccount
	now               func() time.Time
	renewals          singleflight.Group

	mu sync.Mutex
	// tok is the token in use, nil before the first or after a refusal;
	// its Expiry is the hub's expirationTimestamp.
	tok *oauth2.Token
	// asked is when tok was asked for; renewAt when it stops being fresh.
	asked, renewAt time.Time
	// stale: a spoke answered tok with 401 (ResetTokenOlderThan).
	stale bool
	// notBefore is the earliest next TokenRequest (spacing, backoff).
	notBefore time.Time
	backoff   time.Duration
	// err is the last failure; nil since the last success.
	err error
}

var _ transport.ResettableTokenSource = (*requestedTokens)(nil)

func newRequestedTokens(e profile.ClusterEntry, hub *HubAccount, now func() time.Time) *requestedTokens {
	return &requestedTokens{
		cluster: e.Name, audience: e.TokenAudience, seconds: int64(e.TokenExpiration.Seconds()),
		hub: hub, now: now,
	}
}

// Token returns the token for the cluster's next request.
func (ts *requestedTokens) Token() (*oauth2.Token, error) {
	now := ts.now()
	ts.mu.Lock()
	tok, usable, stale := ts.tok, ts.usable(now), ts.stale
	fresh := usable && !stale && now.Before(ts.renewAt)
	wait := now.Before(ts.notBefore)
	ts.mu.Unlock()
	switch {
	case fresh:
		return tok, nil
	case wait:
		return ts.current(now)
	}
	renewed := ts.renewals.DoChan("", func() (any, error) { return ts.renew() })
	if usable && !stale {
		return tok, nil // renewed in the background
	}
	r := <-renewed
	if r.Err != nil {
		return nil, r.Err
	}
	return r.Val.(*oauth2.Token), nil
}

// current is the token in use while no TokenRequest may be sent: a valid
// one, or why there is none.
func (ts *requestedTokens) current(now time.Time) (*oauth2.Token, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	switch {
	case ts.usable(now):
		return ts.tok, nil
	case ts.err != nil:
		return nil, ts.err
	}
	return nil, &tokenRequestError{msg: fmt.Sprintf("cluster %s: the token from the hub expired and it is too soon to ask for another", ts.cluster)}
}

// usable reports whether tok may still be sent at now. Call with mu held.
func (ts *requestedTokens) usable(now time.Time) bool {
	return ts.tok != nil && now.Before(ts.tok.Expiry.Add(-tokenLeeway))
}

// ResetTokenOlderThan marks the token stale if it was asked for before t:
// a spoke answered a request that carried it with 401.
func (ts *requestedTokens) ResetTokenOlderThan(t time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tok != nil && ts.asked.Before(t) {
		ts.stale = true
	}
}

// Expiry is the expiry of the token in use, for the cluster's health.
func (ts *requestedTokens) Expiry() (time.Time, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tok == nil {
		return time.Time{}, false
	}
	return ts.tok.Expiry.UTC(), true
}

// renew asks the hub for a token and returns the one to use: the new one,
// or after a failure the old one while it is valid, or the failure.
func (ts *requestedTokens) renew() (*oauth2.Token, error) {
	asked := ts.now()
	ts.mu.Lock()
	done := ts.tok != nil && !ts.stale && asked.Before(ts.renewAt)
	wait := asked.Before(ts.notBefore)
	ts.mu.Unlock()
	if done || wait {
		// Another renewal ended between the caller's look and this one.
		return ts.current(asked)
	}

	ctx, cancel := context.WithTimeout(context.Background(), tokenRequestTimeout)
	defer cancel()
	seconds := ts.seconds
	resp, err := ts.hub.tokens.CreateToken(ctx, ts.hub.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{ts.audience}, ExpirationSeconds: &seconds, BoundObjectRef: ts.hub.boundObjectRef()},
	}, metav1.CreateOptions{})
	if err != nil {
		err = retry.NotReady(ctx, ts.hub.server, err)
	}
	now := ts.now()

	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err == nil {
		err = ts.accept(resp, asked, now)
	}
	if err == nil {
		return ts.tok, nil
	}
	ts.backoff = min(max(2*ts.backoff, tokenRetryInitial), tokenRetryMax)
	ts.notBefore = now.Add(ts.backoff)
	terr := ts.explain(err)
	if terr.refused {
		ts.tok = nil // fail closed
	}
	ts.err = terr
	if ts.usable(now) {
		return ts.tok, nil
	}
	return nil, terr
}

// accept takes the hub's answer to a TokenRequest asked at asked, or says
// what is wrong with it. Call with mu held.
func (ts *requestedTokens) accept(resp *authenticationv1.TokenRequest, asked, now time.Time) error {
	exp := resp.Status.ExpirationTimestamp.Time
	switch {
	case resp.Status.Token == "":
		return errors.New("the hub answered the TokenRequest without a token")
	case !exp.After(asked):
		// The hub's clock is behind this one's by more than the lifetime:
		// renewing at 80 % of nothing would ask again on every request.
		return fmt.Errorf("the hub's token expires at %s, before it was asked for (clocks apart?)", exp.UTC().Format(time.RFC3339))
	}
	ts.tok = &oauth2.Token{AccessToken: resp.Status.Token, TokenType: "Bearer", Expiry: exp}
	ts.asked, ts.renewAt = asked, asked.Add(exp.Sub(asked)*8/10)
	ts.stale, ts.backoff, ts.err = false, 0, nil
	ts.notBefore = now.Add(tokenRenewSpacing)
	return nil
}

// explain words a failed TokenRequest for the cluster's operator: a
// refusal names what the hub lacks; anything else will be asked again.
func (ts *requestedTokens) explain(err error) *tokenRequestError {
	acct := ts.hub.Namespace + "/" + ts.hub.Name
	switch {
	case apierrors.IsForbidden(err) && !retry.IsTransient(err):
		return &tokenRequestError{refused: true, msg: fmt.Sprintf(
			"cluster %s: the hub refused a token for audience %q: the controller's service account %s needs create on serviceaccounts/token "+
				"with resourceNames [%s] in namespace %s (crucible render hub --token-request, or the hub chart's rbac.tokenRequest): %v",
			ts.cluster, ts.audience, acct, ts.hub.Name, ts.hub.Namespace, err)}
	case apierrors.IsNotFound(err):
		return &tokenRequestError{refused: true, msg: fmt.Sprintf("cluster %s: the hub has no service account %s to ask a token of: %v", ts.cluster, acct, err)}
	case !retry.IsTransient(err) && isAPIStatus(err):
		return &tokenRequestError{refused: true, msg: fmt.Sprintf("cluster %s: the hub refused a token for audience %q (service account %s): %v", ts.cluster, ts.audience, acct, err)}
	}
	return &tokenRequestError{msg: fmt.Sprintf("cluster %s: no token for audience %q from the hub yet (service account %s; asking again): %v", ts.cluster, ts.audience, acct, err)}
}

func isAPIStatus(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}
