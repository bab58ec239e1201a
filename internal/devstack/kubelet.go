package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The controller runs outside any pod here, so the stack plays its kubelet:
// it writes the controller's projected service-account tokens — one for the
// hub's audience, one per spoke with that spoke's name as audience — and
// rewrites them well before they expire, as the kubelet does at 80% of the
// lifetime. Each generation is bound to a Secret of its own so that a test
// can revoke the previous token by deleting its Secret.

// TokenTTL is the lifetime of a projected token, the minimum kube-apiserver
// issues.
const TokenTTL = 10 * time.Minute

// projectedToken is one token file and the audience it carries.
type projectedToken struct {
	File     string `json:"file"`
	Audience string `json:"audience"`
}

type tokenState struct {
	Generation int              `json:"generation"`
	Tokens     []projectedToken `json:"tokens"`
}

func tokenStatePath(dir string) string { return filepath.Join(dir, "crucible", "tokens.json") }

// kubelet writes and rotates the controller's token files.
type kubelet struct {
	hub   kubernetes.Interface
	dir   string
	mu    sync.Mutex
	state tokenState
}

func newKubelet(hub kubernetes.Interface, dir string, tokens []projectedToken) *kubelet {
	return &kubelet{hub: hub, dir: dir, state: tokenState{Tokens: tokens}}
}

// rotate writes a new generation of every token, bound to a new Secret, and
// deletes the previous generation's Secret when revoke is set (which makes
// the old tokens invalid once kube-apiserver's 10 s cache expires).
func (k *kubelet) rotate(ctx context.Context, revoke bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	gen := k.state.Generation + 1
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName(gen), Namespace: HubNamespace}}
	created, err := k.hub.CoreV1().Secrets(HubNamespace).Create(ctx, secret, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create token binding secret: %w", err)
	}
	ttl := int64(TokenTTL.Seconds())
	for _, t := range k.state.Tokens {
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{t.Audience}, ExpirationSeconds: &ttl,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: created.Name, UID: created.UID},
		}}
		resp, err := k.hub.CoreV1().ServiceAccounts(HubNamespace).CreateToken(ctx, HubServiceAccount, req, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("token request for audience %s: %w", t.Audience, err)
		}
		if err := writeFileAtomic(t.File, []byte(resp.Status.Token), 0o600); err != nil {
			return err
		}
	}
	if revoke && k.state.Generation > 0 {
		err := k.hub.CoreV1().Secrets(HubNamespace).Delete(ctx, secretName(k.state.Generation), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("revoke previous tokens: %w", err)
		}
	}
	k.state.Generation = gen
	data, _ := json.Marshal(k.state)
	return writeFileAtomic(tokenStatePath(k.dir), data, 0o600)
}

func secretName(gen int) string { return "crucible-controller-token-" + strconv.Itoa(gen) }

// run rewrites the tokens at 80% of their lifetime until ctx ends.
func (k *kubelet) run(ctx context.Context, log func(string, ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(TokenTTL * 8 / 10):
		}
		if err := k.rotate(ctx, false); err != nil && ctx.Err() == nil {
			log("token refresh failed (retrying in 10s): %v", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Second):
			}
		}
	}
}

// RotateControllerTokens writes a new generation of the controller's tokens
// and revokes the previous one, as a rotation with an immediate revocation
// would: the controller must carry on without a restart.
func (s *Stack) RotateControllerTokens(ctx context.Context) error {
	if s.kubelet == nil {
		return fmt.Errorf("the stack runs no controller")
	}
	return s.kubelet.rotate(ctx, true)
}

// RunTokenRefresher keeps the tokens of a detached stack in dir fresh until
// ctx ends; `crucible dev up --detach` runs it as a process of the stack.
func RunTokenRefresher(ctx context.Context, dir string) error {
	data, err := os.ReadFile(tokenStatePath(dir))
	if err != nil {
		return err
	}
	var st tokenState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("read %s: %w", tokenStatePath(dir), err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, hubName+".kubeconfig"))
	if err != nil {
		return err
	}
	hub, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	k := &kubelet{hub: hub, dir: dir, state: st}
	k.run(ctx, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) })
	return nil
}
