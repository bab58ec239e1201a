package webhook

import (
	"context"
	"fmt"
	"io/fs"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"
)

// maxConfigMapStateBytes bounds all the providers' state one ConfigMap
// holds, below the 1 MiB the API server allows an object, so that a write
// that would not fit is refused here with the reason rather than there.
const maxConfigMapStateBytes = 900 << 10

// StateConfigMap is a StateStore in one ConfigMap, a key per provider
// (provider-<name>.json), for a webhook whose pods come and go on any node
// (the spoke chart's). It only gets and updates the object, never creates
// it: RBAC can grant get and update on one ConfigMap by name but create
// only on every name, so the installer creates it empty and grants the
// webhook those two verbs on it alone.
func StateConfigMap(client corev1client.ConfigMapsGetter, namespace, name string) (StateStore, error) {
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("state ConfigMap namespace %q: %s", namespace, msgs[0])
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, fmt.Errorf("state ConfigMap name %q: %s", name, msgs[0])
	}
	return &stateConfigMap{client: client.ConfigMaps(namespace), namespace: namespace, name: name}, nil
}

type stateConfigMap struct {
	client    corev1client.ConfigMapInterface
	namespace string
	name      string
}

func (c *stateConfigMap) String() string { return "configmap " + c.namespace + "/" + c.name }

// read is the provider's key of the ConfigMap. A key not there yet is
// fs.ErrNotExist, as a missing file; a missing ConfigMap, a refusal or an
// unreachable API server are errors, logged by the caller: the webhook
// then starts without persisted keys, as it would without a store.
func (c *stateConfigMap) read(ctx context.Context, provider string) ([]byte, error) {
	key, err := stateName(provider)
	if err != nil {
		return nil, err
	}
	cm, err := c.client.Get(ctx, c.name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", c, err)
	}
	data, ok := cm.Data[key]
	if !ok {
		return nil, fmt.Errorf("%s has no key %s: %w", c, key, fs.ErrNotExist)
	}
	if len(data) > MaxStateBytes {
		return nil, fmt.Errorf("%w: %s key %s is larger than %d bytes", errStateRefused, c, key, MaxStateBytes)
	}
	return []byte(data), nil
}

// write sets the provider's key, re-reading and retrying on a conflict
// (every replica of the webhook writes the same object). A value that is
// already newer, written by another replica's later fetch, is kept.
func (c *stateConfigMap) write(ctx context.Context, p persisted) error {
	key, err := stateName(p.Provider)
	if err != nil {
		return err
	}
	data, err := encodeState(p)
	if err != nil {
		return err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := c.client.Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if newerState(cm.Data[key], p) {
			return nil
		}
		if over := configMapBytes(cm) - len(cm.Data[key]) + len(data); over > maxConfigMapStateBytes {
			return fmt.Errorf("%s would hold %d bytes, more than %d", c, over, maxConfigMapStateBytes)
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = string(data)
		_, err = c.client.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "crucible-authn-webhook"})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s does not exist (the webhook updates it but never creates it): %w", c, err)
	case err != nil:
		return fmt.Errorf("update %s: %w", c, err)
	}
	return nil
}

// newerState reports whether stored, a value of the same key, holds a
// later fetch of the same provider than p. Anything that does not decode
// is not newer, and is replaced.
func newerState(stored string, p persisted) bool {
	if stored == "" {
		return false
	}
	s, _, err := decodeState([]byte(stored))
	if err != nil {
		return false
	}
	return s.Provider == p.Provider && s.Issuer == p.Issuer && s.DiscoveryURL == p.DiscoveryURL &&
		s.FetchedAt.After(p.FetchedAt)
}

// configMapBytes is the size of cm's data and binary data.
func configMapBytes(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	for k, v := range cm.BinaryData {
		n += len(k) + len(v)
	}
	return n
}
