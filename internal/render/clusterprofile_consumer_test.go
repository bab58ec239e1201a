package render

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

var consumerClusters = []AccessCluster{
	{Name: "wharf", Server: "https://wharf:6443"},
	{Name: "dock", Server: "https://dock:6443", Audience: "https://dock.example.com"},
}

// tokenVolume is the projected token ConsumerPod gives a spoke.
func tokenVolume(name, audience string) corev1.Volume {
	return corev1.Volume{Name: "crucible-token-" + name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: audience, ExpirationSeconds: ptr.To[int64](3600), Path: "token",
		}}},
	}}}
}

var providersVolume = corev1.Volume{Name: "crucible-providers", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
	LocalObjectReference: corev1.LocalObjectReference{Name: "crucible-clusterprofile-providers"},
}}}

// With the defaults the consumer's pod gets crucible copied to the path the
// provider file runs, one token per spoke for the audience its webhook
// expects at the layout credential reads with no setting, and the provider
// file; no env, since every path is credential's default.
func TestConsumerPodDefaults(t *testing.T) {
	got, err := ConsumerPod(consumerClusters, ConsumerOptions{Command: ConsumerCommand, TokenDir: ConsumerTokenDir, Image: "registry.example.com/crucible:v1"})
	if err != nil {
		t.Fatal(err)
	}
	want := ConsumerValues{
		InitContainers: []corev1.Container{{
			Name: "crucible-bin", Image: "registry.example.com/crucible:v1",
			Command:         []string{"crucible", "copy-self", "/var/run/crucible/bin"},
			VolumeMounts:    []corev1.VolumeMount{{Name: "crucible-bin", MountPath: "/var/run/crucible/bin"}},
			Resources:       pushInitResources(),
			SecurityContext: restrictedContainer(),
		}},
		Volumes: []corev1.Volume{
			{Name: "crucible-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			tokenVolume("wharf", "wharf"),
			tokenVolume("dock", "https://dock.example.com"),
			providersVolume,
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "crucible-bin", MountPath: "/var/run/crucible/bin", ReadOnly: true},
			{Name: "crucible-token-wharf", MountPath: "/var/run/secrets/crucible/wharf", ReadOnly: true},
			{Name: "crucible-token-dock", MountPath: "/var/run/secrets/crucible/dock", ReadOnly: true},
			{Name: "crucible-providers", MountPath: "/etc/crucible/clusterprofile", ReadOnly: true},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("consumer values (-want +got):\n%s", diff)
	}
}

// A bare command is the consumer image's own crucible: nothing is copied.
// Another token directory is mounted as asked and handed to credential in
// CRUCIBLE_TOKEN_DIR.
func TestConsumerPodOwnBinaryAndTokenDir(t *testing.T) {
	got, err := ConsumerPod(consumerClusters[:1], ConsumerOptions{Command: "crucible", TokenDir: "/tokens"})
	if err != nil {
		t.Fatal(err)
	}
	want := ConsumerValues{
		Volumes: []corev1.Volume{tokenVolume("wharf", "wharf"), providersVolume},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "crucible-token-wharf", MountPath: "/tokens/wharf", ReadOnly: true},
			{Name: "crucible-providers", MountPath: "/etc/crucible/clusterprofile", ReadOnly: true},
		},
		Env: []corev1.EnvVar{{Name: "CRUCIBLE_TOKEN_DIR", Value: "/tokens"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("consumer values (-want +got):\n%s", diff)
	}
}

// Every problem is reported at once, each naming its value: what the
// kubelet or credential would refuse later, in a pod nobody is watching.
func TestConsumerPodRefusals(t *testing.T) {
	long := strings.Repeat("a", 50) // a DNS label, but not with the volume prefix
	for _, tc := range []struct {
		name     string
		clusters []AccessCluster
		o        ConsumerOptions
		want     []string
	}{
		{"no image for the copy", consumerClusters, ConsumerOptions{Command: ConsumerCommand, TokenDir: ConsumerTokenDir},
			[]string{`image: required with the command "/var/run/crucible/bin/crucible"`}},
		{"image unused", consumerClusters, ConsumerOptions{Command: "crucible", TokenDir: ConsumerTokenDir, Image: "r/c:1"},
			[]string{`image "r/c:1": unused`}},
		{"copy under another name", consumerClusters, ConsumerOptions{Command: "/opt/bin/kubectl-crucible", TokenDir: ConsumerTokenDir, Image: "r/c:1"},
			[]string{`provider command "/opt/bin/kubectl-crucible": the init container copies crucible`}},
		{"image with a space", consumerClusters, ConsumerOptions{Command: ConsumerCommand, TokenDir: ConsumerTokenDir, Image: "r/c :1"},
			[]string{`image "r/c :1"`}},
		{"relative command, relative token dir", consumerClusters, ConsumerOptions{Command: "bin/crucible", TokenDir: "tokens"},
			[]string{`provider command "bin/crucible"`, `token dir "tokens"`}},
		{"token dir /", consumerClusters, ConsumerOptions{Command: "crucible", TokenDir: "/"}, []string{`token dir "/"`}},
		{"no clusters", nil, ConsumerOptions{Command: "crucible", TokenDir: ConsumerTokenDir}, []string{"no clusters"}},
		{"bad names", []AccessCluster{{Name: "Wharf"}, {Name: long}, {Name: "dock", Audience: "dock "}},
			ConsumerOptions{Command: "crucible", TokenDir: ConsumerTokenDir},
			[]string{`cluster "Wharf"`, "cluster " + long + ": its token volume crucible-token-" + long, `cluster dock: audience "dock "`}},
		{"one spoke twice", []AccessCluster{{Name: "wharf"}, {Name: "wharf"}}, ConsumerOptions{Command: "crucible", TokenDir: ConsumerTokenDir},
			[]string{"mount path /var/run/secrets/crucible/wharf: both crucible-token-wharf and crucible-token-wharf"}},
		{"binary over a token", []AccessCluster{{Name: "bin"}}, ConsumerOptions{Command: "/t/bin/crucible", TokenDir: "/t", Image: "r/c:1"},
			[]string{"mount path /t/bin: both crucible-bin and crucible-token-bin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ConsumerPod(tc.clusters, tc.o)
			if err == nil {
				t.Fatalf("rendered %+v; want a refusal", v)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
