package devstack

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podRun is one pod the runtime has seen, from its first event to its
// object's deletion.
type podRun struct {
	uid                        types.UID
	namespace, name, container string

	mu      sync.Mutex
	log     *criLog // nil until the process starts
	waiting string  // why it has not started yet
	// net and pid are the pod's network and the process whose network
	// namespace it is; nil and 0 without pod networks.
	net *podNet
	pid int

	deleting   chan struct{} // closed when the pod is being deleted
	deleteOnce sync.Once
	grace      time.Duration
	gone       chan struct{} // closed when the object is gone
	goneOnce   sync.Once
}

func newPodRun(pod *corev1.Pod) *podRun {
	p := &podRun{
		uid: pod.UID, namespace: pod.Namespace, name: pod.Name, waiting: "ContainerCreating",
		deleting: make(chan struct{}), gone: make(chan struct{}),
	}
	if len(pod.Spec.Containers) > 0 {
		p.container = pod.Spec.Containers[0].Name
	}
	return p
}

func (p *podRun) requestDelete(pod *corev1.Pod) {
	p.deleteOnce.Do(func() {
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = *g
		}
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			grace = *g
		}
		p.grace = time.Duration(grace) * time.Second
		close(p.deleting)
	})
}

func (p *podRun) markGone() { p.goneOnce.Do(func() { close(p.gone) }) }

func (p *podRun) isGone() bool {
	select {
	case <-p.gone:
		return true
	default:
		return false
	}
}

func (p *podRun) getLog() *criLog {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log
}

func (p *podRun) waitingReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

// podFailure is why a pod could not start; it becomes the pod's reason and
// message.
type podFailure struct{ Reason, Message string }

func (f *podFailure) Error() string { return f.Reason + ": " + f.Message }

// errDeleted: the pod was deleted before its process started.
var errDeleted = errors.New("pod deleted before it started")

// run is the life of one pod: start, report, supervise, report, finalise.
func (r *nodeRuntime) run(p *podRun, pod *corev1.Pod) {
	ctx := r.ctx
	select {
	case <-p.deleting: // deleted before it ever ran
		r.awaitDeletion(ctx, p, pod)
		return
	default:
	}
	proc, err := r.launch(ctx, p, pod)
	if err != nil {
		var fail *podFailure
		switch {
		case errors.Is(err, errDeleted) || ctx.Err() != nil:
		case errors.As(err, &fail):
			r.emptyLog(p, pod)
			r.updateStatus(ctx, pod, notStartedStatus(fail))
		default:
			r.emptyLog(p, pod)
			r.updateStatus(ctx, pod, notStartedStatus(&podFailure{Reason: "DevRuntimeError", Message: err.Error()}))
		}
		r.awaitDeletion(ctx, p, pod)
		return
	}
	r.updateStatus(ctx, pod, runningStatus(pod, proc.started, proc.cmd.Process.Pid))
	end := r.supervise(ctx, p, pod, proc)
	// The volumes, working directory and network go with the process, as
	// a container's do; the log stays.
	_ = os.RemoveAll(filepath.Join(r.podBase, string(pod.UID)))
	p.mu.Lock()
	pn := p.net
	p.net, p.pid = nil, 0
	p.mu.Unlock()
	pn.remove()
	r.updateStatus(ctx, pod, terminatedStatus(pod, end, proc.cmd.Process.Pid))
	r.awaitDeletion(ctx, p, pod)
}

// emptyLog gives a pod that failed before it started an empty, complete log,
// so that collecting its log succeeds.
func (r *nodeRuntime) emptyLog(p *podRun, pod *corev1.Pod) {
	l, err := r.newLog(pod)
	if err != nil {
		r.log("dev runtime: log of pod %s/%s: %v", pod.Namespace, pod.Name, err)
		return
	}
	l.abandon()
	p.mu.Lock()
	p.log = l
	p.mu.Unlock()
}

// podProcess is a started pod process.
type podProcess struct {
	cmd     *exec.Cmd
	started time.Time
	exited  chan struct{} // closed once the main process has exited; it is reaped (cmd.Wait) only after its group was killed
	log     *criLog
	copiers sync.WaitGroup
	pipes   []*os.File // read ends, closed if copiers hang
	stopAux context.CancelFunc
}

// ending is how a pod process ended.
type ending struct {
	started, finished time.Time
	exitCode          int32
	deadline          bool
}

// supervise waits for the process to end, terminating it on deletion, on its
// activeDeadlineSeconds, or when the runtime stops.
func (r *nodeRuntime) supervise(ctx context.Context, p *podRun, pod *corev1.Pod, proc *podProcess) ending {
	var deadline <-chan time.Time
	if ads := pod.Spec.ActiveDeadlineSeconds; ads != nil {
		t := time.NewTimer(time.Until(proc.started.Add(time.Duration(*ads) * time.Second)))
		defer t.Stop()
		deadline = t.C
	}
	pgid := proc.cmd.Process.Pid
	end := ending{started: proc.started}
	select {
	case <-proc.exited:
	case <-p.deleting:
		r.terminate(ctx, p, proc, p.grace)
	case <-deadline:
		end.deadline = true
		grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
		if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = *g
		}
		r.terminate(ctx, p, proc, time.Duration(grace)*time.Second)
	case <-p.gone:
	case <-ctx.Done():
	}
	// Whatever is left of the group goes with the main process, as a
	// container's cgroup would. The main process is not reaped before this
	// (waitExited), so pgid is still this pod's group: once reaped, its
	// number is free, and a new process — a restarted kube-apiserver of the
	// stack, another pod — may lead a group of that number.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-proc.exited
	waitGroupGone(pgid, 5*time.Second)
	_ = proc.cmd.Wait() // reaps the main process: pgid is no longer ours
	end.finished = time.Now()
	proc.stopAux()
	if ws, ok := proc.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		end.exitCode = 128 + int32(ws.Signal())
	} else {
		end.exitCode = int32(proc.cmd.ProcessState.ExitCode())
	}
	done := make(chan struct{})
	go func() { proc.copiers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second): // a process that left the group holds the pipe
		for _, f := range proc.pipes {
			_ = f.Close()
		}
		<-done
	}
	return end
}

// waitGroupGone waits until no live process is left in process group pgid,
// so that a pod counts as ended only once all of it is. A SIGKILLed process
// lingers for a moment; one reparented to an init that does not reap stays a
// zombie, which counts as gone.
func waitGroupGone(pgid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for groupHasLive(pgid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

func groupHasLive(pgid int) bool { return LiveInGroup(pgid) > 0 }

// LiveInGroup counts the live (not zombie) processes of process group pgid,
// from /proc: the runtime waits for it to reach 0 before a pod counts as
// ended, and tests check a cancelled pod's processes with it.
func LiveInGroup(pgid int) int {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return 0
	}
	n := 0
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(data[i+1:]))
		if len(fields) > 2 && fields[0] != "Z" && fields[0] != "X" && fields[2] == strconv.Itoa(pgid) {
			n++
		}
	}
	return n
}

// terminate sends SIGTERM to the process group and SIGKILL after grace.
func (r *nodeRuntime) terminate(ctx context.Context, p *podRun, proc *podProcess, grace time.Duration) {
	pgid := proc.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-proc.exited:
	case <-t.C:
	case <-p.gone:
	case <-ctx.Done():
	}
}

// awaitDeletion waits until the pod is deleted, then finalises it as the
// kubelet does: the object is removed with a zero grace period.
func (r *nodeRuntime) awaitDeletion(ctx context.Context, p *podRun, pod *corev1.Pod) {
	select {
	case <-p.deleting:
	case <-p.gone:
		return
	case <-ctx.Done():
		return
	}
	err := r.retryAPI(ctx, func(ctx context.Context) error {
		err := r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone, or another pod of the same name now
		}
		return err
	})
	if err != nil && ctx.Err() == nil {
		r.log("dev runtime: finalise pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

// updateStatus applies mutate to the pod's latest status and writes it,
// retrying conflicts and outages until the pod is gone or the runtime stops.
// A 403 is retried too, as a kubelet's status manager retries every pod's
// status until the API server takes it: an API server restarted under load
// can refuse the node for a moment, and a status given up on leaves the
// pod running (or pending) forever.
func (r *nodeRuntime) updateStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.PodStatus)) {
	pods := r.client.CoreV1().Pods(pod.Namespace)
	refused := false
	retryRefusal := func(err error) error {
		if !apierrors.IsForbidden(err) {
			return err
		}
		if !refused {
			refused = true
			r.log("dev runtime: status of pod %s/%s: %v; retrying", pod.Namespace, pod.Name, err)
		}
		return errRetry
	}
	err := r.retryAPI(ctx, func(ctx context.Context) error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errPodGone
		}
		if err != nil {
			return retryRefusal(err)
		}
		if cur.UID != pod.UID {
			return errPodGone
		}
		mutate(&cur.Status)
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return errPodGone
		}
		return retryRefusal(err)
	})
	if err != nil && !errors.Is(err, errPodGone) && ctx.Err() == nil {
		r.log("dev runtime: status of pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}
