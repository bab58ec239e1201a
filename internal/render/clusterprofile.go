package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"

	"crucible.dev/crucible/internal/workpod"
)

// AccessProviderName is the default name crucible's entry has both in a
// ClusterProfile's status.accessProviders and in the consumer's provider
// file: the credentials library pairs the two by this name.
const AccessProviderName = "crucible"

// ClusterManagerName is the default spec.clusterManager.name (and the
// x-k8s.io/cluster-manager label) of the ClusterProfiles crucible renders,
// so a consumer or an admin can tell them from another inventory's.
const ClusterManagerName = "crucible"

// execExtensionName is the cluster extension client-go hands an exec plugin
// as KUBERNETES_EXEC_INFO's spec.cluster.config (with provideClusterInfo),
// reserved by SIG Auth; `crucible credential` reads which spoke it is from it.
const execExtensionName = "client.authentication.k8s.io/exec"

// execExtension is what `crucible credential` reads from
// spec.cluster.config: the cluster's name, and its token's audience only
// where that is not the name, so the token file stays the consumer pod's
// layout (the chart's /var/run/secrets/crucible/<spoke>/token).
type execExtension struct {
	Cluster  string `json:"cluster"`
	Audience string `json:"audience,omitempty"`
}

// AccessCluster is what a consumer needs of one spoke, from the profile's
// [[clusters]] entry (or the hub chart's spokes entry): where it is, what
// verifies it, and which audience its token is projected for.
type AccessCluster struct {
	Name   string
	Server string
	// CAPEM verifies the spoke API's serving certificate (the cluster's
	// ca_file); nil trusts the consumer's system roots.
	CAPEM []byte
	// Audience is the spoke's token audience where the hub chart overrides
	// it (spokes[].audience); "" is the spoke's name, as render spoke
	// configures the spoke's webhook.
	Audience string
}

// audience is the audience the spoke's webhook expects of a token.
func (c AccessCluster) audience() string {
	if c.Audience == "" {
		return c.Name
	}
	return c.Audience
}

// check refuses what `crucible credential` would refuse later, in the
// consumer's pod, where nobody reads the error: a cluster name that is not
// a DNS label, an audience padded with whitespace.
func (c AccessCluster) check() error {
	if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
		return fmt.Errorf("cluster %q: %s", c.Name, strings.Join(errs, "; "))
	}
	if strings.TrimSpace(c.Audience) != c.Audience {
		return fmt.Errorf("cluster %s: audience %q: leading or trailing whitespace", c.Name, c.Audience)
	}
	return nil
}

// ProfileOptions are the names a consumer and its admin know crucible's
// ClusterProfiles by. The CLI's flags and the hub chart's clusterProfiles
// values default them to the namespace crucible and the names above.
type ProfileOptions struct {
	// Namespace is the consumer's: MultiKueue reads ClusterProfiles in its
	// own (kueue-system).
	Namespace string
	// Provider is the access provider's name, in status and in the
	// consumer's provider file alike.
	Provider string
	// ClusterManager is spec.clusterManager.name and the
	// x-k8s.io/cluster-manager label's value.
	ClusterManager string
}

// Validate reports every bad option at once, each with its value: all
// three end up in object names or labels the API server would refuse one
// at a time, after the first objects were applied.
func (o ProfileOptions) Validate() error {
	var errs []error
	if e := validation.IsDNS1123Label(o.Namespace); len(e) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q: %s", o.Namespace, strings.Join(e, "; ")))
	}
	if err := checkProviderName(o.Provider); err != nil {
		errs = append(errs, err)
	}
	if e := validation.IsValidLabelValue(o.ClusterManager); len(e) > 0 || o.ClusterManager == "" {
		errs = append(errs, fmt.Errorf("cluster manager %q: must be a non-empty label value (it is the %s label)", o.ClusterManager, cpv1alpha1.LabelClusterManagerKey))
	}
	return errors.Join(errs...)
}

// checkProviderName holds the provider name to a DNS label: the consumer's
// admin types it into the consumer's configuration, where a space or a
// slash would be a puzzle.
func checkProviderName(name string) error {
	if e := validation.IsDNS1123Label(name); len(e) > 0 {
		return fmt.Errorf("provider name %q: %s", name, strings.Join(e, "; "))
	}
	return nil
}

// ClusterProfile is the multicluster.x-k8s.io/v1alpha1 ClusterProfile of
// spoke c, for any KEP-4322 consumer (Kueue MultiKueue, the
// cluster-inventory-api credentials library): status.accessProviders holds
// one entry, o.Provider, with the spoke's server, CA and the exec extension
// {"cluster": NAME} (with "audience" where c overrides it). Status is a
// subresource: kubectl apply and helm drop it, so whoever creates the
// object writes status separately.
func ClusterProfile(c AccessCluster, o ProfileOptions) (*cpv1alpha1.ClusterProfile, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("cluster %s: server %q: want an https URL", c.Name, c.Server)
	}
	x := execExtension{Cluster: c.Name}
	if c.audience() != c.Name {
		x.Audience = c.Audience
	}
	ext, err := json.Marshal(x)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: encode exec extension: %w", c.Name, err)
	}
	return &cpv1alpha1.ClusterProfile{
		TypeMeta: metav1.TypeMeta{APIVersion: cpv1alpha1.GroupVersion.String(), Kind: "ClusterProfile"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      c.Name,
			Namespace: o.Namespace,
			Labels: map[string]string{
				workpod.LabelManagedBy:            workpod.ManagedByValue,
				cpv1alpha1.LabelClusterManagerKey: o.ClusterManager,
			},
		},
		Spec: cpv1alpha1.ClusterProfileSpec{
			DisplayName:    c.Name,
			ClusterManager: cpv1alpha1.ClusterManager{Name: o.ClusterManager},
		},
		Status: cpv1alpha1.ClusterProfileStatus{
			// Empty, not null: crucible does not probe the spoke's health at
			// render time, and a made-up ControlPlaneHealthy would lie.
			Conditions: []metav1.Condition{},
			AccessProviders: []cpv1alpha1.AccessProvider{{
				Name: o.Provider,
				Cluster: clientcmdv1.Cluster{
					Server:                   c.Server,
					CertificateAuthorityData: c.CAPEM,
					Extensions: []clientcmdv1.NamedExtension{{
						Name:      execExtensionName,
						Extension: runtime.RawExtension{Raw: ext},
					}},
				},
			}},
		},
	}, nil
}

// ProviderFile is the consumer's --clusterprofile-provider-file: the
// provider runs command (crucible's absolute path in the consumer's pod, or
// a name on its PATH) as `credential --server-pins PINS` with
// provideClusterInfo, so one entry serves every spoke, the spoke is the
// ClusterProfile's extension, and where its token may go is the consumer's
// pins file (ServerPinsFile). Never interactive: a controller has no
// terminal to prompt on.
func ProviderFile(provider, command, pins string) ([]byte, error) {
	if err := checkProviderName(provider); err != nil {
		return nil, err
	}
	if err := checkCommand(command); err != nil {
		return nil, err
	}
	if !path.IsAbs(pins) || path.Clean(pins) != pins {
		return nil, fmt.Errorf("server pins path %q: want a clean absolute path (the consumer's working directory is unknown)", pins)
	}
	file := credentials.CredentialsProvider{Providers: []credentials.Provider{{
		Name: provider,
		ExecConfig: &clientcmdapi.ExecConfig{
			APIVersion:         "client.authentication.k8s.io/v1",
			Command:            command,
			Args:               []string{"credential", "--server-pins", pins},
			Env:                []clientcmdapi.ExecEnvVar{},
			ProvideClusterInfo: true,
			InteractiveMode:    clientcmdapi.NeverExecInteractiveMode,
		},
	}}}
	out, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode provider file: %w", err)
	}
	return append(out, '\n'), nil
}

// checkCommand takes what client-go's exec can run without a shell and
// without depending on the consumer's working directory: an absolute path,
// or a bare name looked up on PATH.
func checkCommand(command string) error {
	switch {
	case command == "":
		return fmt.Errorf("provider command: must not be empty")
	case strings.ContainsFunc(command, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return fmt.Errorf("provider command %q: must not contain whitespace or control characters", command)
	case strings.HasPrefix(command, "/"):
		if path.Clean(command) != command || command == "/" {
			return fmt.Errorf("provider command %q: want a clean absolute path", command)
		}
	case strings.Contains(command, "/") || command == "." || command == "..":
		return fmt.Errorf("provider command %q: want an absolute path or a name on the consumer's PATH, not a relative path", command)
	}
	return nil
}
