package render

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// The consumer's pod: a ClusterProfile consumer (Kueue's manager, Argo CD's
// controller, your own) runs `crucible credential` as its exec plugin, so
// its pod needs crucible, one projected token per spoke where credential
// looks for it, and the provider file. No chart can add these to another
// release's Deployment; ConsumerPod renders them for the consumer's chart.
const (
	// ProvidersConfigMap holds the provider file in the consumer's
	// namespace; the hub chart's clusterProfiles install it by this name.
	ProvidersConfigMap = "crucible-clusterprofile-providers"
	// ProvidersKey is the provider file's key in ProvidersConfigMap.
	ProvidersKey = "providers.json"
	// ProvidersMountPath is where the consumer's container sees the
	// ConfigMap: its --clusterprofile-provider-file is
	// ProvidersMountPath/ProvidersKey.
	ProvidersMountPath = "/etc/crucible/clusterprofile"
	// ConsumerTokenDir is where `crucible credential` finds <cluster>/token
	// when CRUCIBLE_TOKEN_DIR is unset: the hub chart's own layout, so a
	// consumer pod mounted the same way needs no setting.
	ConsumerTokenDir = "/var/run/secrets/crucible" //nolint:gosec // G101: a mount path, not a credential
	// EnvTokenDir moves that directory.
	EnvTokenDir = "CRUCIBLE_TOKEN_DIR"
	// ConsumerCommand is crucible in the consumer's pod once the init
	// container has copied it, as in a work pod with [pods] push_image.
	ConsumerCommand = BinDir + "/crucible"

	// consumerTokenExpirationSeconds is the hub chart's
	// spokeTokenExpirationSeconds default: the kubelet rotates at 80 %.
	consumerTokenExpirationSeconds = 3600
	volumeProviders                = "crucible-providers"
	tokenVolumePrefix              = "crucible-token-" //nolint:gosec // G101: a volume name, not a credential
)

// ConsumerOptions say how the consumer's pod runs crucible.
type ConsumerOptions struct {
	// Command is crucible as the provider file names it: an absolute path
	// is filled by an init container copying crucible into an emptyDir
	// there (so it must end in /crucible); a bare name is the consumer
	// image's own, found on its PATH, and nothing is copied.
	Command string
	// TokenDir holds <cluster>/token; anything but ConsumerTokenDir is
	// passed to the container as CRUCIBLE_TOKEN_DIR.
	TokenDir string
	// Image is crucible's image, which the init container runs; required
	// with an absolute Command, refused with a bare one.
	Image string
}

// ConsumerValues are pod-spec fragments for the consumer's chart values:
// initContainers and volumes for the pod, volumeMounts and env for the
// container that runs the exec plugin.
type ConsumerValues struct {
	InitContainers []corev1.Container   `json:"initContainers,omitempty"`
	Volumes        []corev1.Volume      `json:"volumes"`
	VolumeMounts   []corev1.VolumeMount `json:"volumeMounts"`
	Env            []corev1.EnvVar      `json:"env,omitempty"`
}

// ConsumerPod renders the consumer's side for clusters: a projected token
// of the consumer's own service account per spoke, for the audience that
// spoke's webhook expects, at TokenDir/<cluster>/token (the layout
// `crucible credential` reads), the provider ConfigMap, and crucible itself
// unless the image has it. It reports every problem at once.
func ConsumerPod(clusters []AccessCluster, o ConsumerOptions) (ConsumerValues, error) {
	errs := o.check()
	if len(clusters) == 0 {
		errs = append(errs, errors.New("no clusters: the consumer needs a token for at least one spoke"))
	}
	var v ConsumerValues
	if path.IsAbs(o.Command) {
		dir := path.Dir(o.Command)
		v.InitContainers = []corev1.Container{{
			Name:            PushInitContainerName,
			Image:           o.Image,
			Command:         []string{"crucible", "copy-self", dir},
			VolumeMounts:    []corev1.VolumeMount{{Name: volumeBin, MountPath: dir}},
			Resources:       pushInitResources(),
			SecurityContext: restrictedContainer(),
		}}
		v.Volumes = append(v.Volumes, corev1.Volume{Name: volumeBin, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		v.VolumeMounts = append(v.VolumeMounts, corev1.VolumeMount{Name: volumeBin, MountPath: dir, ReadOnly: true})
	}
	for _, c := range clusters {
		if err := c.checkConsumer(); err != nil {
			errs = append(errs, err)
			continue
		}
		name := tokenVolumePrefix + c.Name
		v.Volumes = append(v.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience:          c.audience(),
				ExpirationSeconds: ptr.To[int64](consumerTokenExpirationSeconds),
				Path:              "token",
			}}},
		}}})
		v.VolumeMounts = append(v.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path.Join(o.TokenDir, c.Name), ReadOnly: true})
	}
	v.Volumes = append(v.Volumes, corev1.Volume{Name: volumeProviders, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: ProvidersConfigMap},
	}}})
	v.VolumeMounts = append(v.VolumeMounts, corev1.VolumeMount{Name: volumeProviders, MountPath: ProvidersMountPath, ReadOnly: true})
	if o.TokenDir != ConsumerTokenDir {
		v.Env = []corev1.EnvVar{{Name: EnvTokenDir, Value: o.TokenDir}}
	}
	errs = append(errs, uniqueMounts(v.VolumeMounts)...)
	if err := errors.Join(errs...); err != nil {
		return ConsumerValues{}, err
	}
	return v, nil
}

// check refuses options that would render a pod the kubelet cannot start
// or a plugin credential cannot run.
func (o ConsumerOptions) check() []error {
	var errs []error
	if err := checkCommand(o.Command); err != nil {
		errs = append(errs, err)
	}
	switch {
	case !path.IsAbs(o.Command) && o.Image != "":
		errs = append(errs, fmt.Errorf("image %q: unused, the command %q is the consumer image's own (give crucible's absolute path in the pod to have it copied there)", o.Image, o.Command))
	case path.IsAbs(o.Command) && path.Base(o.Command) != "crucible":
		errs = append(errs, fmt.Errorf("provider command %q: the init container copies crucible as <dir>/crucible, so the path must end in /crucible", o.Command))
	case path.IsAbs(o.Command) && o.Image == "":
		errs = append(errs, fmt.Errorf("image: required with the command %q (crucible's image, whose init container copies crucible there)", o.Command))
	case strings.ContainsFunc(o.Image, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		errs = append(errs, fmt.Errorf("image %q: must be an image reference, without whitespace or control characters", o.Image))
	}
	if !path.IsAbs(o.TokenDir) || path.Clean(o.TokenDir) != o.TokenDir || o.TokenDir == "/" {
		errs = append(errs, fmt.Errorf("token dir %q: want a clean absolute path other than /", o.TokenDir))
	}
	return errs
}

// checkConsumer refuses a spoke whose token volume could not exist: the
// volume's name is a DNS label of at most 63 characters.
func (c AccessCluster) checkConsumer() error {
	if err := c.check(); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Label(tokenVolumePrefix + c.Name); len(errs) > 0 {
		return fmt.Errorf("cluster %s: its token volume %s%s: %s", c.Name, tokenVolumePrefix, c.Name, strings.Join(errs, "; "))
	}
	return nil
}

// uniqueMounts refuses two volumes at one path, which the API server
// refuses only once the consumer's chart is deployed: the bin directory or
// a token directory on top of another, or one spoke twice.
func uniqueMounts(mounts []corev1.VolumeMount) []error {
	var errs []error
	seen := map[string]string{}
	for _, m := range mounts {
		if other, ok := seen[m.MountPath]; ok {
			errs = append(errs, fmt.Errorf("mount path %s: both %s and %s", m.MountPath, other, m.Name))
			continue
		}
		seen[m.MountPath] = m.Name
	}
	return errs
}
