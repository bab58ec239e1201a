package render

import (
	"encoding/json"
	"fmt"
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/workpod"
)

// AccessProviderName is the name crucible's entry has both in a
// ClusterProfile's status.accessProviders and in the consumer's provider
// file: the credentials library pairs the two by this name.
const AccessProviderName = "crucible"

// ClusterManagerName is the spec.clusterManager.name (and the
// x-k8s.io/cluster-manager label) of the ClusterProfiles crucible renders,
// so a consumer or an admin can tell them from another inventory's.
const ClusterManagerName = "crucible"

// execExtensionName is the cluster extension client-go hands an exec plugin
// as KUBERNETES_EXEC_INFO's spec.cluster.config (with provideClusterInfo),
// reserved by SIG Auth; `crucible credential` reads which spoke it is from it.
const execExtensionName = "client.authentication.k8s.io/exec"

// execExtension is what `crucible credential` reads from
// spec.cluster.config: only the cluster's name, so the token file and the
// audience stay the consumer pod's layout (the chart's
// /var/run/secrets/crucible/<spoke>/token, audience = the spoke).
type execExtension struct {
	Cluster string `json:"cluster"`
}

// ClusterProfile is the multicluster.x-k8s.io/v1alpha1 ClusterProfile of
// spoke c in namespace, for any KEP-4322 consumer (Kueue MultiKueue, the
// cluster-inventory-api credentials library): status.accessProviders holds
// one entry, "crucible", with the spoke's server, caPEM (the cluster's
// ca_file; nil trusts the consumer's system roots) and the exec extension
// {"cluster": NAME}. Status is a subresource: kubectl apply drops it, so
// whoever creates the object writes status separately.
func ClusterProfile(c fleet.ClusterEntry, namespace string, caPEM []byte) (*cpv1alpha1.ClusterProfile, error) {
	if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("cluster %s: server %q: want an https URL", c.Name, c.Server)
	}
	ext, err := json.Marshal(execExtension{Cluster: c.Name})
	if err != nil {
		return nil, fmt.Errorf("cluster %s: encode exec extension: %w", c.Name, err)
	}
	return &cpv1alpha1.ClusterProfile{
		TypeMeta: metav1.TypeMeta{APIVersion: cpv1alpha1.GroupVersion.String(), Kind: "ClusterProfile"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      c.Name,
			Namespace: namespace,
			Labels: map[string]string{
				workpod.LabelManagedBy:            workpod.ManagedByValue,
				cpv1alpha1.LabelClusterManagerKey: ClusterManagerName,
			},
		},
		Spec: cpv1alpha1.ClusterProfileSpec{
			DisplayName:    c.Name,
			ClusterManager: cpv1alpha1.ClusterManager{Name: ClusterManagerName},
		},
		Status: cpv1alpha1.ClusterProfileStatus{
			// Empty, not null: crucible does not probe the spoke's health at
			// render time, and a made-up ControlPlaneHealthy would lie.
			Conditions: []metav1.Condition{},
			AccessProviders: []cpv1alpha1.AccessProvider{{
				Name: AccessProviderName,
				Cluster: clientcmdv1.Cluster{
					Server:                   c.Server,
					CertificateAuthorityData: caPEM,
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
// "crucible" provider runs command (crucible, or its absolute path) as
// `credential` with provideClusterInfo, so one entry serves every spoke and
// the spoke is the ClusterProfile's extension, never a flag per cluster.
// Never interactive: a controller has no terminal to prompt on.
func ProviderFile(command string) ([]byte, error) {
	if command == "" {
		return nil, fmt.Errorf("provider command: must not be empty")
	}
	file := credentials.CredentialsProvider{Providers: []credentials.Provider{{
		Name: AccessProviderName,
		ExecConfig: &clientcmdapi.ExecConfig{
			APIVersion:         "client.authentication.k8s.io/v1",
			Command:            command,
			Args:               []string{"credential"},
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
