package devstack_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

func createPod(t *testing.T, spoke *devstack.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func podLog(t *testing.T, spoke *devstack.Cluster, name string) string {
	t.Helper()
	raw, err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("log of %s: %v", name, err)
	}
	return string(raw)
}

// firstLogLine polls the pod's log until it has a full first line.
func firstLogLine(t *testing.T, spoke *devstack.Cluster, name string) string {
	t.Helper()
	var line string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil // not started yet
		}
		first, _, ok := strings.Cut(string(raw), "\n")
		line = first
		return ok, nil
	})
	if err != nil {
		t.Fatalf("no first log line of %s: %v", name, err)
	}
	return line
}

func pgidFromLog(t *testing.T, spoke *devstack.Cluster, name string) int {
	t.Helper()
	line := firstLogLine(t, spoke, name)
	pid, err := strconv.Atoi(line)
	if err != nil || pid <= 1 {
		t.Fatalf("first log line of %s = %q, want the shell's pid", name, line)
	}
	return pid
}

func TestPodRunsItsCommand(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	created := createPod(t, spoke, testPod("hello", "sh", "-c", "echo hello"))
	if created.Spec.NodeName != "" {
		t.Fatalf("pod created with nodeName %q; the test needs the scheduler to set it", created.Spec.NodeName)
	}
	done := waitPod(t, spoke.Client, "hello", finished)
	if done.Spec.NodeName != devstack.NodeName {
		t.Errorf("scheduled onto %q, want %q", done.Spec.NodeName, devstack.NodeName)
	}
	if done.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s (%s: %s), want Succeeded", done.Status.Phase, done.Status.Reason, done.Status.Message)
	}
	if len(done.Status.ContainerStatuses) != 1 {
		t.Fatalf("container statuses = %+v", done.Status.ContainerStatuses)
	}
	term := done.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 0 || term.Reason != "Completed" || term.StartedAt.IsZero() || term.FinishedAt.Before(&term.StartedAt) {
		t.Errorf("terminated state = %+v, want exit 0, Completed, real start and finish", term)
	}
	if got := podLog(t, spoke, "hello"); got != "hello\n" {
		t.Errorf("log = %q, want %q", got, "hello\n")
	}
}

func TestExitCodeFailsPod(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	createPod(t, spoke, testPod("fails", "sh", "-c", "echo to stderr >&2; exit 3"))
	done := waitPod(t, spoke.Client, "fails", finished)
	if done.Status.Phase != corev1.PodFailed {
		t.Errorf("phase %s, want Failed", done.Status.Phase)
	}
	if cs := done.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Terminated == nil ||
		cs[0].State.Terminated.ExitCode != 3 || cs[0].State.Terminated.Reason != "Error" {
		t.Errorf("container statuses = %+v, want one terminated with exit code 3, reason Error", cs)
	}
	if got := podLog(t, spoke, "fails"); got != "to stderr\n" {
		t.Errorf("log = %q", got)
	}
}

func TestPodLogsNeverMix(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	script := `for i in 1 2 3 4 5; do echo "$0 $i"; sleep 0.1; done`
	for _, name := range []string{"mix-a", "mix-b"} {
		createPod(t, spoke, testPod(name, "sh", "-c", script, name))
	}
	for _, name := range []string{"mix-a", "mix-b"} {
		waitPod(t, spoke.Client, name, finished)
		var want strings.Builder
		for i := 1; i <= 5; i++ {
			fmt.Fprintf(&want, "%s %d\n", name, i)
		}
		if diff := cmp.Diff(want.String(), podLog(t, spoke, name)); diff != "" {
			t.Errorf("log of %s (-want +got):\n%s", name, diff)
		}
	}
}

func TestPodEnvValuesAndFieldRefs(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	// $(MODE) in the command is expanded by the runtime, as Kubernetes does.
	pod := testPod("env", "sh", "-c", `printf '%s|' "$MODE" "$DERIVED" "$NAME" "$NS" "$UID_" "$NODE" "$IP" "$SA" "$(MODE)"; echo "${PATH%%:*}"`)
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "MODE", Value: "fast"},
		{Name: "DERIVED", Value: "$(MODE)-$(NOPE)-$$(MODE)"},
		{Name: "NAME", ValueFrom: field("metadata.name")},
		{Name: "NS", ValueFrom: field("metadata.namespace")},
		{Name: "UID_", ValueFrom: field("metadata.uid")},
		{Name: "NODE", ValueFrom: field("spec.nodeName")},
		{Name: "IP", ValueFrom: field("status.podIP")},
		{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
	}
	created := createPod(t, spoke, pod)
	done := waitPod(t, spoke.Client, "env", finished)
	want := strings.Join([]string{"fast", "fast-$(NOPE)-$(MODE)", "env", devstack.SpokeNamespace, string(created.UID),
		devstack.NodeName, done.Status.PodIP, devstack.SpokeServiceAccount, "fast", "/usr/local/sbin"}, "|") + "\n"
	if got := podLog(t, spoke, "env"); got != want {
		t.Errorf("env seen by the pod = %q, want %q", got, want)
	}
}

func TestPodWithoutCommandFails(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	createPod(t, spoke, testPod("no-command"))
	done := waitPod(t, spoke.Client, "no-command", finished)
	if done.Status.Phase != corev1.PodFailed || done.Status.Reason != "DevRuntimeNeedsCommand" ||
		!strings.Contains(done.Status.Message, "needs a command") {
		t.Errorf("status = %s %s %q, want Failed DevRuntimeNeedsCommand saying it needs a command", done.Status.Phase, done.Status.Reason, done.Status.Message)
	}
}

// The volumes crucible renders are at their mountPaths (the ConfigMap and
// Secret created after the pod, as crucible does), and the projected token is
// a real token of this pod.
func TestPodVolumesAtMountPath(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	if s.PodIsolation != devstack.IsolationMountNamespace {
		t.Skipf("this machine runs pods with isolation %s", s.PodIsolation)
	}
	_, hostHadDir := os.Stat("/etc/crucible")
	pod := volumePod("volumes", `cat /etc/crucible/files/input.txt; echo; cat /etc/crucible/secrets/key; echo; cat /var/run/secrets/crucible/ingest/token; echo; id -u; ls /etc/passwd >/dev/null && echo host-etc-visible`)
	created := createPod(t, spoke, pod)
	createVolumeObjects(t, spoke)
	done := waitPod(t, spoke.Client, "volumes", finished)
	if done.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("phase %s; log:\n%s", done.Status.Phase, podLog(t, spoke, "volumes"))
	}
	lines := strings.Split(strings.TrimSuffix(podLog(t, spoke, "volumes"), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("log lines = %q, want 5", lines)
	}
	if lines[0] != "hello" || lines[1] != "s3cret" || lines[4] != "host-etc-visible" {
		t.Errorf("files = %q, want hello, s3cret, and the host's /etc still visible", lines)
	}
	if os.Geteuid() == 0 && lines[3] != "65534" {
		t.Errorf("uid = %s, want 65534 (nobody)", lines[3])
	}
	checkPodToken(t, spoke, lines[2], created)
	if _, err := os.Stat("/etc/crucible"); hostHadDir != nil && err == nil {
		t.Errorf("the host got an /etc/crucible directory")
	}
}

func volumePod(name, script string) *corev1.Pod {
	pod := testPod(name, "sh", "-c", script)
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "files", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name + "-files"}}}},
		{Name: "secrets", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name + "-secrets"}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
			ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "crucible-ingest", ExpirationSeconds: ptr.To[int64](600), Path: "token"},
		}}}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "files", MountPath: "/etc/crucible/files", ReadOnly: true},
		{Name: "secrets", MountPath: "/etc/crucible/secrets", ReadOnly: true},
		{Name: "token", MountPath: "/var/run/secrets/crucible/ingest", ReadOnly: true},
	}
	return pod
}

func createVolumeObjects(t *testing.T, spoke *devstack.Cluster) {
	t.Helper()
	ctx := t.Context()
	core := spoke.Client.CoreV1()
	if _, err := core.ConfigMaps(devstack.SpokeNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "volumes-files"}, Data: map[string]string{"input.txt": "hello"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Secrets(devstack.SpokeNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "volumes-secrets"}, Data: map[string][]byte{"key": []byte("s3cret")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkPodToken asserts that token is the pod's own: a TokenReview for the
// projection's audience names the pod's service account, name and uid.
func checkPodToken(t *testing.T, spoke *devstack.Cluster, token string, pod *corev1.Pod) {
	t.Helper()
	review, err := spoke.Client.AuthenticationV1().TokenReviews().Create(t.Context(), &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{"crucible-ingest"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := review.Status
	if !st.Authenticated || st.User.Username != "system:serviceaccount:loops:crucible-turn" {
		t.Fatalf("review of the projected token = %+v", st)
	}
	for key, want := range map[string]string{
		"authentication.kubernetes.io/pod-name": pod.Name,
		"authentication.kubernetes.io/pod-uid":  string(pod.UID),
	} {
		if got := st.User.Extra[key]; len(got) != 1 || got[0] != want {
			t.Errorf("extra[%s] = %v, want [%s]", key, got, want)
		}
	}
}

// A followed pods/log delivers each line as it is printed: the first lines
// arrive while the pod still runs, and the stream ends when it finishes.
func TestFollowedLogDeliversLinesLive(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	pods := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace)
	createPod(t, spoke, testPod("live", "sh", "-c", `for i in 1 2 3 4 5; do echo "line $i"; sleep 1; done`))
	waitPod(t, spoke.Client, "live", func(p *corev1.Pod) bool { return p.Status.Phase != corev1.PodPending })
	stream, err := pods.GetLogs("live", &corev1.PodLogOptions{Follow: true}).Stream(t.Context())
	if err != nil {
		t.Fatalf("follow log: %v", err)
	}
	defer stream.Close()
	sc := bufio.NewScanner(stream)
	var got []string
	for sc.Scan() {
		got = append(got, sc.Text())
		if len(got) == 1 {
			p, err := pods.Get(t.Context(), "live", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if finished(p) {
				t.Errorf("the first line arrived only after the pod finished (%s)", p.Status.Phase)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("followed stream: %v", err)
	}
	if diff := cmp.Diff([]string{"line 1", "line 2", "line 3", "line 4", "line 5"}, got); diff != "" {
		t.Errorf("followed log (-want +got):\n%s", diff)
	}
	// The stream ended because the pod finished.
	waitPod(t, spoke.Client, "live", finished)

	// timestamps and sinceTime, as the live-log feature reconnects with them.
	raw, err := pods.GetLogs("live", &corev1.PodLogOptions{Timestamps: true}).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	ts, text, _ := strings.Cut(lines[2], " ")
	when, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil || text != "line 3" {
		t.Fatalf("timestamped line = %q (%v)", lines[2], err)
	}
	since := metav1.NewTime(when.Truncate(time.Second))
	raw, err = pods.GetLogs("live", &corev1.PodLogOptions{SinceTime: &since}).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(raw), "line 3\nline 4\nline 5\n") || strings.Contains(string(raw), "line 1") {
		t.Errorf("log since %s = %q", since, raw)
	}
}

// Deleting a pod sends SIGTERM to its process group and SIGKILL after the
// grace period; then the object is removed.
func TestPodDeletionKillsProcessGroup(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	// The shell and its sleep ignore SIGTERM: only the SIGKILL ends them.
	// ($$$$ is the shell's $$: Kubernetes expands $$ in a command to $.)
	pod := testPod("deleted", "sh", "-c", `trap '' TERM; echo $$$$; sleep 3600; echo unreachable`)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	createPod(t, spoke, pod)
	pgid := pgidFromLog(t, spoke, "deleted")
	if devstack.LiveInGroup(pgid) == 0 {
		t.Fatalf("process group %d not running", pgid)
	}
	if err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).Delete(t.Context(), "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := spoke.Client.CoreV1().Pods(devstack.SpokeNamespace).Get(ctx, "deleted", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod object not finalised: %v", err)
	}
	if devstack.LiveInGroup(pgid) > 0 {
		t.Errorf("process group %d still alive after the pod was deleted", pgid)
	}
}

func TestActiveDeadlineSeconds(t *testing.T) {
	s := devstacktest.Shared(t)
	spoke := s.Spoke(devstack.DefaultSpokeName)
	pod := testPod("deadline", "sh", "-c", "echo $$$$; exec sleep 3600")
	pod.Spec.ActiveDeadlineSeconds = ptr.To[int64](2)
	createPod(t, spoke, pod)
	pgid := pgidFromLog(t, spoke, "deadline")
	done := waitPod(t, spoke.Client, "deadline", finished)
	if done.Status.Phase != corev1.PodFailed || done.Status.Reason != "DeadlineExceeded" {
		t.Errorf("status = %s %s, want Failed DeadlineExceeded", done.Status.Phase, done.Status.Reason)
	}
	if devstack.LiveInGroup(pgid) > 0 {
		t.Errorf("process group %d alive after the deadline", pgid)
	}
}

// Where pods get no mount namespace (forced here), volumes stay in the pod's
// directory and env values naming a mountPath point there; and stopping the
// stack leaves no pod process behind.
func TestPathFallbackAndStopKillsPods(t *testing.T) {
	s := devstacktest.Start(t, devstack.Options{NoPodMountNamespace: true})
	if s.PodIsolation != devstack.IsolationPaths {
		t.Fatalf("isolation = %s, want %s", s.PodIsolation, devstack.IsolationPaths)
	}
	spoke := s.Spoke(devstack.DefaultSpokeName)
	pod := volumePod("volumes", `echo $$$$; cat "$FILE"; echo; cat "$TOKEN_FILE" >/dev/null && echo token-readable; sleep 3600`)
	pod.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "FILE", Value: "/etc/crucible/files/input.txt"},
		{Name: "TOKEN_FILE", Value: "/var/run/secrets/crucible/ingest/token"},
	}
	createPod(t, spoke, pod)
	createVolumeObjects(t, spoke)
	pgid := pgidFromLog(t, spoke, "volumes")
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.HasSuffix(podLog(t, spoke, "volumes"), "hello\ntoken-readable\n"), nil
	})
	if err != nil {
		t.Fatalf("log = %q, want the file's content and the token readable", podLog(t, spoke, "volumes"))
	}
	s.Stop()
	if devstack.LiveInGroup(pgid) > 0 {
		t.Errorf("pod process group %d alive after Stop", pgid)
	}
}
