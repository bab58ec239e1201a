// Package dispatch is the target-aware boundary between the controller and
// the spokes (R-C3): it creates a work pod's objects on the cluster its row
// names, deletes them, and reads their logs, always through that cluster's
// one shared federated client. Names are deterministic, so a dispatch that is
// retried — after a timeout, a crash, a restart — adopts what it already
// created instead of creating it twice.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/retry"
	"crucible.dev/crucible/internal/workpod"
)

// ErrUnknownCluster is returned for a cluster the profile does not name.
var ErrUnknownCluster = errors.New("unknown cluster")

// ErrNotOurs is returned when an object with a work pod's name exists on the
// spoke but was not created by this controller for that work pod.
var ErrNotOurs = errors.New("object exists and is not this work pod's")

// Dispatcher creates, deletes and reads work pods on the fleet's clusters.
type Dispatcher struct {
	Clients *fleet.Clients
	// Pods is the profile's [pods] section, its defaults applied by package
	// fleet: what every work pod gets, and Pods.MaxLogBytes, the bound of a
	// pulled log (tier 1; the drop-box takes larger output), which Logs
	// refuses to read without.
	Pods     profile.Pods
	Instance string
	Retry    retry.Policy
}

// ErrNoLogBound is returned by Logs when Pods.MaxLogBytes is not set: a
// dispatcher built without the profile's [pods] section.
var ErrNoLogBound = errors.New("pods.max_log_bytes is not set: the dispatcher needs the profile's [pods] section")

// Result is what a dispatch created or adopted.
type Result struct {
	Namespace string
	PodUID    types.UID
	Adopted   bool
}

func (d *Dispatcher) client(cluster string) (*fleet.Client, error) {
	c, ok := d.Clients.Get(cluster)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownCluster, cluster)
	}
	return c, nil
}

// Dispatch creates w's Pod and then its ConfigMap and Secret, owned by the
// Pod so the spoke's garbage collector removes them with it. (Created after
// the Pod because ownership needs the Pod's uid and the controller may only
// create, not patch; the kubelet waits for the volumes' sources.) If a later
// step fails for good, the Pod is deleted again: nothing is left half-made.
// w was checked where it was submitted; Dispatch does not check it again.
func (d *Dispatcher) Dispatch(ctx context.Context, cluster string, w workpod.Valid) (Result, error) {
	c, err := d.client(cluster)
	if err != nil {
		return Result{}, err
	}
	objs, err := render.Turn(c.Entry, d.Pods, d.Instance, w)
	if err != nil {
		return Result{}, err
	}
	ns := c.Entry.LoopNamespace

	pod, adopted, err := d.createPod(ctx, c, objs.Pod)
	if err != nil {
		metrics.Dispatches.WithLabelValues(cluster, "error").Inc()
		return Result{}, err
	}
	if err := d.createOwned(ctx, c, pod, objs); err != nil {
		metrics.Dispatches.WithLabelValues(cluster, "error").Inc()
		if derr := d.Delete(context.WithoutCancel(ctx), cluster, ns, pod.Name, pod.UID); derr != nil {
			return Result{}, fmt.Errorf("%w (and removing the pod again failed: %w; the sweep will)", err, derr)
		}
		return Result{}, err
	}
	result := "ok"
	if adopted {
		result = "adopted"
	}
	metrics.Dispatches.WithLabelValues(cluster, result).Inc()
	return Result{Namespace: ns, PodUID: pod.UID, Adopted: adopted}, nil
}

// createPod creates the pod, or adopts it if this work pod's pod already
// exists (a retried dispatch).
func (d *Dispatcher) createPod(ctx context.Context, c *fleet.Client, want *corev1.Pod) (*corev1.Pod, bool, error) {
	pods := c.Kube.CoreV1().Pods(want.Namespace)
	var got *corev1.Pod
	err := d.retry(ctx, c, "create-pod", func(ctx context.Context) error {
		var err error
		got, err = pods.Create(ctx, want, metav1.CreateOptions{})
		return err
	})
	if err == nil {
		return got, false, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, explain(c.Entry.Name, err)
	}
	err = d.retry(ctx, c, "get-pod", func(ctx context.Context) error {
		var err error
		got, err = pods.Get(ctx, want.Name, metav1.GetOptions{})
		return err
	})
	if err != nil {
		return nil, false, explain(c.Entry.Name, err)
	}
	if !sameWorkPod(got.Labels, want.Labels) {
		return nil, false, fmt.Errorf("pod %s/%s on %s: %w", got.Namespace, got.Name, c.Entry.Name, ErrNotOurs)
	}
	return got, true, nil
}

// retry runs fn under the dispatcher's retry policy against cluster c, a
// 403 from c's API server while it is not ready counting as transient
// (retry.NotReady): every call to a spoke takes the same rule.
func (d *Dispatcher) retry(ctx context.Context, c *fleet.Client, op string, fn func(context.Context) error) error {
	return d.retryWithin(ctx, c, d.Retry, op, fn)
}

// retryWithin is retry under policy p instead of the dispatcher's own.
func (d *Dispatcher) retryWithin(ctx context.Context, c *fleet.Client, p retry.Policy, op string, fn func(context.Context) error) error {
	return retry.Do(ctx, p, op, func(ctx context.Context) error {
		return retry.NotReady(ctx, c.Server(), fn(ctx))
	})
}

func sameWorkPod(got, want map[string]string) bool {
	return got[workpod.LabelWorkPod] == want[workpod.LabelWorkPod] && got[workpod.LabelInstance] == want[workpod.LabelInstance] &&
		got[workpod.LabelManagedBy] == workpod.ManagedByValue
}

func (d *Dispatcher) createOwned(ctx context.Context, c *fleet.Client, pod *corev1.Pod, objs render.Objects) error {
	if cm := objs.ConfigMap; cm != nil {
		render.Own(cm, pod)
		cms := c.Kube.CoreV1().ConfigMaps(cm.Namespace)
		err := d.retry(ctx, c, "create-configmap", func(ctx context.Context) error {
			_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
			return err
		})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return explain(c.Entry.Name, err)
		}
	}
	if sec := objs.Secret; sec != nil {
		render.Own(sec, pod)
		secrets := c.Kube.CoreV1().Secrets(sec.Namespace)
		err := d.retry(ctx, c, "create-secret", func(ctx context.Context) error {
			_, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
			return err
		})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return explain(c.Entry.Name, err)
		}
	}
	return nil
}

// Delete deletes the pod if it is still the one with uid (a precondition, so a
// newer pod of the same name is never hit). Gone already is success.
func (d *Dispatcher) Delete(ctx context.Context, cluster, namespace, name string, uid types.UID) error {
	c, err := d.client(cluster)
	if err != nil {
		return err
	}
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err = d.retry(ctx, c, "delete-pod", func(ctx context.Context) error {
		return c.Kube.CoreV1().Pods(namespace).Delete(ctx, name, opts)
	})
	if err == nil || apierrors.IsNotFound(err) || (uid != "" && apierrors.IsConflict(err)) {
		return nil
	}
	return explain(cluster, err)
}

// Gone reports whether the pod namespace/name of uid is gone from cluster:
// no pod of that name, or one of another uid. A pod being deleted (a
// kubelet still stopping it) is not gone. It is how a mover confirms a
// pod gone before its row may have another.
func (d *Dispatcher) Gone(ctx context.Context, cluster, namespace, name string, uid types.UID) (bool, error) {
	c, err := d.client(cluster)
	if err != nil {
		return false, err
	}
	var pod *corev1.Pod
	err = d.retry(ctx, c, "get-pod", func(ctx context.Context) error {
		pod, err = c.Kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, explain(cluster, err)
	}
	return pod.UID != uid, nil
}

// Logs streams the pod's whole log, at most Pods.MaxLogBytes, into consume
// (a longer one cut, saying so: CutLog). A
// transient failure, opening the stream or while consume reads it, starts
// the stream again within p (the caller's policy: the reconciler retries a
// log for less than its whole budget, see reconcile.logRetryBudget);
// consume must therefore start afresh each call (the artifact writer stages
// into a new temp file each time). Streaming spares holding a log of up to
// Pods.MaxLogBytes in memory per collecting worker.
func (d *Dispatcher) Logs(ctx context.Context, p retry.Policy, cluster, namespace, name string, consume func(io.Reader) error) error {
	limit := d.Pods.MaxLogBytes
	if limit <= 0 {
		return ErrNoLogBound
	}
	c, err := d.client(cluster)
	if err != nil {
		return err
	}
	err = d.retryWithin(ctx, c, p, "pod-log", func(ctx context.Context) error {
		more := limit + 1 // one byte past the bound tells a cut log from one that fits
		rc, err := c.Kube.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{LimitBytes: &more}).Stream(ctx)
		if err != nil {
			return err
		}
		defer rc.Close()
		return consume(CutLog(rc, limit))
	})
	if err != nil {
		return explain(cluster, err)
	}
	return nil
}

// explain turns a spoke's 403 into a message that names the missing verb and
// resource, which is what a platform engineer fixing RBAC needs to see.
// QuotaExceeded reports whether err is a spoke's ResourceQuota refusing a
// create: the admission plugin's 403 "exceeded quota". It is a refusal for
// capacity, which placement answers by moving the pod on, not an
// authorization failure.
func QuotaExceeded(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota")
}

func explain(cluster string, err error) error {
	var status apierrors.APIStatus
	if apierrors.IsForbidden(err) && errors.As(err, &status) {
		return fmt.Errorf("spoke %s denied it (check the RBAC of `crucible render spoke`): %w", cluster, err)
	}
	return fmt.Errorf("spoke %s: %w", cluster, err)
}

// FollowLogs opens the work container's log with a timestamp on every line,
// from since (zero: the start; the API server rounds it down to the second),
// following new lines while follow — for the live view, which reconnects
// itself after transient errors and so is not retried here.
func (d *Dispatcher) FollowLogs(ctx context.Context, cluster, namespace, name string, since time.Time, follow bool) (io.ReadCloser, error) {
	c, err := d.client(cluster)
	if err != nil {
		return nil, err
	}
	opts := &corev1.PodLogOptions{Container: render.ContainerName, Follow: follow, Timestamps: true}
	if !since.IsZero() {
		opts.SinceTime = &metav1.Time{Time: since}
	}
	rc, err := c.Kube.CoreV1().Pods(namespace).GetLogs(name, opts).Stream(ctx)
	if err != nil {
		return nil, explain(cluster, err)
	}
	return rc, nil
}
