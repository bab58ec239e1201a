package devstack

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The statuses the runtime writes, shaped as a kubelet's: addresses, the
// pod's conditions and the first container's state. Pod processes share the
// host's network, so the pod's IP is the node's.

const podIP = "127.0.0.1"

func setAddresses(st *corev1.PodStatus) {
	st.HostIP, st.PodIP = podIP, podIP
	st.HostIPs = []corev1.HostIP{{IP: podIP}}
	st.PodIPs = []corev1.PodIP{{IP: podIP}}
}

func setCondition(st *corev1.PodStatus, typ corev1.PodConditionType, status corev1.ConditionStatus, reason string, now metav1.Time) {
	for i, c := range st.Conditions {
		if c.Type == typ {
			if c.Status != status {
				st.Conditions[i].LastTransitionTime = now
			}
			st.Conditions[i].Status, st.Conditions[i].Reason = status, reason
			return
		}
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: typ, Status: status, Reason: reason, LastTransitionTime: now})
}

func containerStatus(pod *corev1.Pod, state corev1.ContainerState, ready bool, pid int) corev1.ContainerStatus {
	c := pod.Spec.Containers[0]
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: state, Ready: ready, Started: &ready}
	if pid > 0 {
		cs.ContainerID = "crucible-dev://" + strconv.Itoa(pid)
	}
	return cs
}

// pendingStatus: the pod waits for a volume's object.
func pendingStatus(pod *corev1.Pod, reason string) func(*corev1.PodStatus) {
	return func(st *corev1.PodStatus) {
		setAddresses(st)
		st.Phase = corev1.PodPending
		st.ContainerStatuses = []corev1.ContainerStatus{containerStatus(pod, corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: reason},
		}, false, 0)}
	}
}

// notStartedStatus: the pod cannot run; it fails with the reason.
func notStartedStatus(f *podFailure) func(*corev1.PodStatus) {
	return func(st *corev1.PodStatus) {
		now := metav1.Now()
		setAddresses(st)
		st.Phase, st.Reason, st.Message = corev1.PodFailed, f.Reason, f.Message
		setCondition(st, corev1.PodInitialized, corev1.ConditionTrue, "", now)
		setCondition(st, corev1.PodReady, corev1.ConditionFalse, "PodFailed", now)
		setCondition(st, corev1.ContainersReady, corev1.ConditionFalse, "PodFailed", now)
		if st.StartTime == nil {
			st.StartTime = &now
		}
	}
}

func runningStatus(pod *corev1.Pod, started time.Time, pid int) func(*corev1.PodStatus) {
	return func(st *corev1.PodStatus) {
		t := metav1.NewTime(started)
		setAddresses(st)
		st.Phase = corev1.PodRunning
		st.StartTime = &t
		setCondition(st, corev1.PodInitialized, corev1.ConditionTrue, "", t)
		setCondition(st, corev1.PodReady, corev1.ConditionTrue, "", t)
		setCondition(st, corev1.ContainersReady, corev1.ConditionTrue, "", t)
		st.ContainerStatuses = []corev1.ContainerStatus{containerStatus(pod, corev1.ContainerState{
			Running: &corev1.ContainerStateRunning{StartedAt: t},
		}, true, pid)}
	}
}

func terminatedStatus(pod *corev1.Pod, e ending, pid int) func(*corev1.PodStatus) {
	return func(st *corev1.PodStatus) {
		finished := metav1.NewTime(e.finished)
		reason := "Completed"
		st.Phase = corev1.PodSucceeded
		if e.exitCode != 0 || e.deadline {
			reason, st.Phase = "Error", corev1.PodFailed
		}
		if e.deadline {
			st.Reason, st.Message = "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
		}
		setCondition(st, corev1.PodReady, corev1.ConditionFalse, "PodCompleted", finished)
		setCondition(st, corev1.ContainersReady, corev1.ConditionFalse, "PodCompleted", finished)
		st.ContainerStatuses = []corev1.ContainerStatus{containerStatus(pod, corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{
				ExitCode: e.exitCode, Reason: reason,
				StartedAt: metav1.NewTime(e.started), FinishedAt: finished,
				ContainerID: "crucible-dev://" + strconv.Itoa(pid),
			},
		}, false, pid)}
	}
}
