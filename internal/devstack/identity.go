package devstack

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// createIdentities makes the namespaces and service accounts of ADR-0048: the
// controller's on the hub, the work pods' on every spoke.
func (s *Stack) createIdentities(ctx context.Context) error {
	if err := ensureServiceAccount(ctx, s.Hub, HubNamespace, HubServiceAccount); err != nil {
		return err
	}
	return each(s.Spokes, func(c *Cluster) error {
		return ensureServiceAccount(ctx, c, c.LoopNamespace, SpokeServiceAccount)
	})
}

func ensureServiceAccount(ctx context.Context, c *Cluster, namespace, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s on %s: %w", namespace, c.Name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := c.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account %s/%s on %s: %w", namespace, name, c.Name, err)
	}
	return nil
}

// TokenRequest asks the cluster for a token of namespace/serviceAccount, as
// the kubelet does for a projected volume. bound, if set, binds the token to
// that object (a Pod or Secret) so deleting it invalidates the token.
func (c *Cluster) TokenRequest(ctx context.Context, namespace, serviceAccount string, audiences []string, expirySeconds int64, bound *authenticationv1.BoundObjectReference) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         audiences,
		ExpirationSeconds: &expirySeconds,
		BoundObjectRef:    bound,
	}}
	resp, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token request for %s/%s on %s: %w", namespace, serviceAccount, c.Name, err)
	}
	return resp.Status.Token, nil
}
