package devstack

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var getOpts = metav1.GetOptions{}

// prepareVolumes writes the volumes the container mounts into dir, one
// directory per volume, and returns the bind mounts to make. ConfigMaps and
// Secrets not created yet are waited for, as the kubelet waits (crucible
// creates them just after the pod). Projected service-account tokens are
// requested bound to the pod and rewritten at 80 % of their life until ctx
// ends.
func (r *nodeRuntime) prepareVolumes(ctx context.Context, p *podRun, pod *corev1.Pod, c corev1.Container, dir string, who podUser) ([]bindMount, error) {
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	prepared := map[string]string{}
	var mounts []bindMount
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			return nil, &podFailure{Reason: "DevRuntimeUnsupported", Message: fmt.Sprintf("volumeMount %s: the dev runtime does not support subPath", m.Name)}
		}
		v, ok := volumes[m.Name]
		if !ok {
			return nil, &podFailure{Reason: "CreateContainerConfigError", Message: fmt.Sprintf("volumeMount %s: no such volume", m.Name)}
		}
		src, ok := prepared[m.Name]
		if !ok {
			src = filepath.Join(dir, m.Name)
			if err := r.prepareVolume(ctx, p, pod, v, src, who); err != nil {
				return nil, err
			}
			prepared[m.Name] = src
		}
		mounts = append(mounts, bindMount{Source: src, Target: filepath.Clean(m.MountPath), ReadOnly: m.ReadOnly, Tmpfs: memoryBacked(v, who)})
	}
	return mounts, nil
}

// memoryBacked is the tmpfs of an emptyDir of medium Memory — the /dev/shm
// of a pod class — sized by its sizeLimit, or nil for any other volume. It
// takes effect only in a private mount namespace; without one the volume is
// a directory in the pod's directory whose size nothing limits.
func memoryBacked(v corev1.Volume, who podUser) *tmpfsMount {
	if v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		return nil
	}
	t := &tmpfsMount{UID: os.Geteuid(), GID: os.Getegid()}
	if who.set {
		t.UID, t.GID = who.uid, who.gid
	}
	if v.EmptyDir.SizeLimit != nil {
		t.SizeBytes = v.EmptyDir.SizeLimit.Value()
	}
	return t
}

func (r *nodeRuntime) prepareVolume(ctx context.Context, p *podRun, pod *corev1.Pod, v corev1.Volume, dir string, who podUser) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := who.chown(dir); err != nil {
		return err
	}
	switch {
	case v.EmptyDir != nil:
		return nil
	case v.ConfigMap != nil:
		return r.writeConfigMap(ctx, p, pod, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, dir, who)
	case v.Secret != nil:
		return r.writeSecret(ctx, p, pod, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, dir, who)
	case v.Projected != nil:
		for _, s := range v.Projected.Sources {
			var err error
			switch {
			case s.ServiceAccountToken != nil:
				err = r.projectToken(ctx, pod, *s.ServiceAccountToken, dir, who)
			case s.ConfigMap != nil:
				err = r.writeConfigMap(ctx, p, pod, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, dir, who)
			case s.Secret != nil:
				err = r.writeSecret(ctx, p, pod, s.Secret.Name, s.Secret.Items, s.Secret.Optional, dir, who)
			case s.DownwardAPI != nil:
				err = writeDownwardAPI(pod, s.DownwardAPI.Items, dir, who)
			default:
				err = &podFailure{Reason: "DevRuntimeUnsupported", Message: fmt.Sprintf("volume %s: the dev runtime supports projected serviceAccountToken, configMap, secret and downwardAPI sources", v.Name)}
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if v.DownwardAPI != nil {
		return writeDownwardAPI(pod, v.DownwardAPI.Items, dir, who)
	}
	return &podFailure{Reason: "DevRuntimeUnsupported", Message: fmt.Sprintf("volume %s: the dev runtime supports emptyDir, configMap, secret, downwardAPI and projected volumes", v.Name)}
}

// writeDownwardAPI writes the pod's fields (fieldRef items) as files; the
// default service-account volume has one, the namespace.
func writeDownwardAPI(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, dir string, who podUser) error {
	data := map[string][]byte{}
	keys := make([]corev1.KeyToPath, 0, len(items))
	for _, it := range items {
		if it.FieldRef == nil {
			return &podFailure{Reason: "DevRuntimeUnsupported", Message: fmt.Sprintf("downwardAPI %s: the dev runtime supports fieldRef items only", it.Path)}
		}
		v, err := podField(pod, it.FieldRef.FieldPath)
		if err != nil {
			return &podFailure{Reason: "CreateContainerConfigError", Message: fmt.Sprintf("downwardAPI %s: %v", it.Path, err)}
		}
		data[it.Path] = []byte(v)
		keys = append(keys, corev1.KeyToPath{Key: it.Path, Path: it.Path, Mode: it.Mode})
	}
	return writeKeys(data, keys, dir, 0o644, who)
}

func (r *nodeRuntime) writeConfigMap(ctx context.Context, p *podRun, pod *corev1.Pod, name string, items []corev1.KeyToPath, optional *bool, dir string, who podUser) error {
	var data map[string][]byte
	err := r.waitObject(ctx, p, pod, "configmap "+name, optional, func(ctx context.Context) error {
		cm, err := r.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, name, getOpts)
		if err != nil {
			return err
		}
		data = map[string][]byte{}
		for k, v := range cm.Data {
			data[k] = []byte(v)
		}
		maps.Copy(data, cm.BinaryData)
		return nil
	})
	if err != nil {
		return err
	}
	return writeKeys(data, items, dir, 0o644, who)
}

func (r *nodeRuntime) writeSecret(ctx context.Context, p *podRun, pod *corev1.Pod, name string, items []corev1.KeyToPath, optional *bool, dir string, who podUser) error {
	var data map[string][]byte
	err := r.waitObject(ctx, p, pod, "secret "+name, optional, func(ctx context.Context) error {
		s, err := r.client.CoreV1().Secrets(pod.Namespace).Get(ctx, name, getOpts)
		if err == nil {
			data = s.Data
		}
		return err
	})
	if err != nil {
		return err
	}
	return writeKeys(data, items, dir, 0o644, who)
}

// waitObject polls get until the object exists, reporting the pod as
// ContainerCreating meanwhile. A missing optional object is no error.
func (r *nodeRuntime) waitObject(ctx context.Context, p *podRun, pod *corev1.Pod, what string, optional *bool, get func(context.Context) error) error {
	reported := false
	for {
		err := get(ctx)
		switch {
		case err == nil:
			return nil
		case apierrors.IsNotFound(err) && optional != nil && *optional:
			return nil
		case apierrors.IsNotFound(err):
			if !reported {
				reported = true
				p.mu.Lock()
				p.waiting = "ContainerCreating (waiting for " + what + ")"
				p.mu.Unlock()
				r.updateStatus(ctx, pod, pendingStatus(pod, "ContainerCreating"))
			}
		case ctx.Err() != nil:
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.deleting:
			return errDeleted
		case <-p.gone:
			return errDeleted
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// writeKeys writes data's keys (or items) as files of dir.
func writeKeys(data map[string][]byte, items []corev1.KeyToPath, dir string, mode os.FileMode, who podUser) error {
	if len(items) == 0 {
		for _, k := range slices.Sorted(maps.Keys(data)) {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return &podFailure{Reason: "CreateContainerConfigError", Message: fmt.Sprintf("no key %q", it.Key)}
		}
		rel := filepath.Clean(it.Path)
		if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return &podFailure{Reason: "CreateContainerConfigError", Message: fmt.Sprintf("path %q leaves the volume", it.Path)}
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode).Perm()
		}
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := writeFileAs(path, v, m, who); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAs writes path atomically (temp file and rename, so a reader sees
// the old or the new content) and gives it to who.
func writeFileAs(path string, data []byte, mode os.FileMode, who podUser) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	if err := who.chown(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// projectToken writes a token for the pod's service account, bound to the
// pod, with the projection's audience and expiry, and rewrites it at 80 % of
// its life until ctx ends, as the kubelet does.
func (r *nodeRuntime) projectToken(ctx context.Context, pod *corev1.Pod, proj corev1.ServiceAccountTokenProjection, dir string, who podUser) error {
	path := filepath.Join(dir, filepath.Clean(proj.Path))
	if !strings.HasPrefix(path, dir+"/") {
		return &podFailure{Reason: "CreateContainerConfigError", Message: fmt.Sprintf("token path %q leaves the volume", proj.Path)}
	}
	expiry, err := r.writeToken(ctx, pod, proj, path, who)
	if err != nil {
		return err
	}
	go func() {
		for {
			wait := time.Until(expiry) * 8 / 10
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			next, err := r.writeToken(ctx, pod, proj, path, who)
			if err != nil {
				if ctx.Err() == nil {
					r.log("dev runtime: refresh token of pod %s/%s (retrying in 10s): %v", pod.Namespace, pod.Name, err)
				}
				expiry = time.Now().Add(12500 * time.Millisecond) // 80 % of it: 10 s
				continue
			}
			expiry = next
		}
	}()
	return nil
}

func (r *nodeRuntime) writeToken(ctx context.Context, pod *corev1.Pod, proj corev1.ServiceAccountTokenProjection, path string, who podUser) (time.Time, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: proj.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if proj.Audience != "" {
		req.Spec.Audiences = []string{proj.Audience}
	}
	var resp *authenticationv1.TokenRequest
	err := r.retryAPI(ctx, func(ctx context.Context) error {
		var err error
		resp, err = r.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return &podFailure{Reason: "CreateContainerConfigError", Message: fmt.Sprintf("token for service account %s: %v", sa, err)}
		}
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	if err := writeFileAs(path, []byte(resp.Status.Token), 0o600, who); err != nil {
		return time.Time{}, err
	}
	return resp.Status.ExpirationTimestamp.Time, nil
}
