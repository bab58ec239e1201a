package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/render"
)

func newRenderClusterProfileCmd() *cobra.Command {
	var (
		config, namespace, command string
		clusters                   []string
		providerFile               bool
	)
	cmd := &cobra.Command{
		Use:   "clusterprofile --config FILE [--namespace NS] [--cluster NAME...] [--provider-file [--command PATH]]",
		Short: "Print a ClusterProfile per spoke, or the consumer's provider file, for MultiKueue and any KEP-4322 consumer",
		Long: `clusterprofile prints one multicluster.x-k8s.io/v1alpha1 ClusterProfile per
cluster of the profile (or per --cluster), for the hub, so that a consumer of
the Cluster Inventory API (Kueue MultiKueue, the cluster-inventory-api
credentials library, your own controller) reaches the spokes through crucible's
federation with no stored secret:

  metadata  name = the cluster, in --namespace, labelled
            x-k8s.io/cluster-manager=crucible
  spec      clusterManager.name: crucible
  status.accessProviders:
  - name: crucible
    cluster:
      server: the cluster's server
      certificate-authority-data: the cluster's ca_file
      extensions:
      - name: client.authentication.k8s.io/exec
        extension: {cluster: NAME}

status is a subresource: kubectl apply (client-side or plain server-side)
creates the object but does not write its status. Write it afterwards with

  kubectl apply --server-side --subresource=status -f FILE

(kubectl 1.28 or later), or kubectl patch --subresource=status.

With --provider-file it prints instead the consumer's provider file (its
--clusterprofile-provider-file, a JSON document): the provider "crucible"
runs "crucible credential" (--command: crucible's path in the consumer's
pod) with provideClusterInfo: true, so the spoke comes from the extension
above and its token from $CRUCIBLE_TOKEN_DIR/<spoke>/token in that pod
(default /var/run/secrets/crucible). See docs/federation.md.`,
		Example: `  # every spoke, for MultiKueue (which reads ClusterProfiles in its own namespace)
  crucible render clusterprofile --config crucible.toml --namespace kueue-system > profiles.yaml
  kubectl --context hub apply -f profiles.yaml
  kubectl --context hub apply --server-side --subresource=status -f profiles.yaml

  # the consumer's provider file, as a ConfigMap it mounts
  crucible render clusterprofile --config crucible.toml --provider-file --command /crucible/bin/crucible > providers.json
  kubectl --context hub -n kueue-system create configmap crucible-providers --from-file=providers.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if providerFile {
				out, err := render.ProviderFile(command)
				if err != nil {
					return fmt.Errorf("--command: %w", err)
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
				return fmt.Errorf("--namespace %q: %s", namespace, strings.Join(errs, "; "))
			}
			p, err := fleet.Load(config)
			if err != nil {
				return fmt.Errorf("--config: %w", err)
			}
			picked, err := pickClusters(p, config, clusters)
			if err != nil {
				return err
			}
			objs, err := clusterProfiles(picked, namespace)
			if err != nil {
				return err
			}
			out, err := render.YAML(objs...)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the controller's profile (TOML; required unless --provider-file)")
	f.StringArrayVar(&clusters, "cluster", nil, "only this spoke (repeatable; default every cluster of the profile)")
	f.StringVar(&namespace, "namespace", "crucible", "the hub namespace of the ClusterProfiles (the consumer's: kueue-system for MultiKueue)")
	f.BoolVar(&providerFile, "provider-file", false, "print the consumer's provider file (JSON) instead of the ClusterProfiles")
	f.StringVar(&command, "command", "crucible", "with --provider-file: the crucible binary as the consumer's pod runs it (a name on its PATH or an absolute path)")
	cmd.MarkFlagsMutuallyExclusive("provider-file", "cluster")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if !providerFile && config == "" {
			return fmt.Errorf("--config: required (the profile whose clusters to render)")
		}
		return nil
	}
	return cmd
}

// pickClusters is the profile's clusters named by the flags, in the
// profile's order, or all of them; an unknown name is refused with the
// names there are.
func pickClusters(p *fleet.Profile, config string, names []string) ([]fleet.ClusterEntry, error) {
	if len(names) == 0 {
		return p.Clusters, nil
	}
	var have []string
	for _, c := range p.Clusters {
		have = append(have, c.Name)
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return nil, fmt.Errorf("--cluster %q: no such cluster in %s (it has: %s)", n, config, strings.Join(have, ", "))
		}
	}
	var picked []fleet.ClusterEntry
	for _, c := range p.Clusters {
		if slices.Contains(names, c.Name) {
			picked = append(picked, c)
		}
	}
	return picked, nil
}

// clusterProfiles renders each cluster's ClusterProfile with its ca_file's
// bytes, read here so that render stays free of I/O.
func clusterProfiles(clusters []fleet.ClusterEntry, namespace string) ([]runtime.Object, error) {
	objs := make([]runtime.Object, 0, len(clusters))
	for _, c := range clusters {
		var ca []byte
		if c.CAFile != "" {
			var err error
			if ca, err = os.ReadFile(c.CAFile); err != nil {
				return nil, fmt.Errorf("cluster %s: ca_file: %w", c.Name, err)
			}
		}
		cp, err := render.ClusterProfile(c, namespace, ca)
		if err != nil {
			return nil, err
		}
		objs = append(objs, cp)
	}
	return objs, nil
}
