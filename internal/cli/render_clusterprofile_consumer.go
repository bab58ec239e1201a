package cli

import (
	"fmt"
	"path"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"crucible.dev/crucible/internal/render"
)

// consumerValuesHeader says, above the YAML, where each part goes: the
// fragments are not one object, and their keys are the consumer chart's.
const consumerValuesHeader = `# crucible render clusterprofile --consumer-values: pod-spec fragments for the consumer's own
# chart values (Kueue's, Argo CD's, yours; key names vary by chart). initContainers and volumes
# go on its pod; volumeMounts (and env, if any) on the container that runs the exec plugin.
# Its provider file is then ` + render.ProvidersMountPath + "/" + render.ProvidersKey + ` (the ConfigMap
# ` + render.ProvidersConfigMap + `, which the hub chart's clusterProfiles install
# in the consumer's namespace): e.g. --clusterprofile-provider-file=` + render.ProvidersMountPath + "/" + render.ProvidersKey + `.
# The same ConfigMap holds ` + render.ServerPinsKey + ` (render clusterprofile --server-pins), mounted at
# ` + render.ServerPinsPath + `: the server, CA and audience each spoke's token may go to.
`

// consumerPod is --consumer-values: the consumer pod's side for the picked
// clusters, with crucible's image from --image or the profile's [pods]
// push_image when the command is a path to fill.
func (fl *clusterProfileFlags) consumerPod(cmd *cobra.Command) ([]byte, error) {
	clusters, p, err := fl.accessClusters(false)
	if err != nil {
		return nil, err
	}
	image := fl.image
	if !cmd.Flags().Changed("image") && path.IsAbs(fl.command) {
		image = p.Pods.PushImage
	}
	v, err := render.ConsumerPod(clusters, render.ConsumerOptions{Command: fl.command, TokenDir: fl.tokenDir, Image: image})
	if err != nil {
		return nil, fmt.Errorf("--consumer-values (--command, --token-dir, --image or [pods] push_image): %w", err)
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode consumer values: %w", err)
	}
	return append([]byte(consumerValuesHeader), out...), nil
}
