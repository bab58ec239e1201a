package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"

	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
)

const clusterProfileLong = `clusterprofile prints one multicluster.x-k8s.io/v1alpha1 ClusterProfile per
cluster of the profile (or per --cluster), for the hub, so that a consumer of
the Cluster Inventory API (Kueue MultiKueue, the cluster-inventory-api
credentials library, your own controller) reaches the spokes through crucible's
federation with no stored secret:

  metadata  name = the cluster, in --namespace, labelled
            x-k8s.io/cluster-manager=crucible (--cluster-manager)
  spec      clusterManager.name: crucible (--cluster-manager)
  status.accessProviders:
  - name: crucible (--provider-name)
    cluster:
      server: the cluster's server
      certificate-authority-data: the cluster's ca_file
      extensions:
      - name: client.authentication.k8s.io/exec
        extension: {cluster: NAME}   (and audience: AUD, with --audience NAME=AUD)

status is a subresource: kubectl apply (client-side or plain server-side)
creates the object but does not write its status. Write it afterwards with

  kubectl apply --server-side --subresource=status -f FILE

(kubectl 1.28 or later), or kubectl patch --subresource=status. The hub
chart's clusterProfiles values install the same objects (docs/federation.md).

--audience NAME=AUD is for a spoke whose token audience is not its name (the
hub chart's spokes[].audience): credential then checks that audience, and
--consumer-values projects the consumer's token for it.

With --provider-file it prints instead the consumer's provider file (its
--clusterprofile-provider-file, a JSON document): the provider "crucible"
runs "crucible credential --server-pins /etc/crucible/clusterprofile/server-pins.json"
(--command: crucible's path in the consumer's pod, default
/var/run/crucible/bin/crucible; --server-pins-path moves the pins) with
provideClusterInfo: true, so the spoke comes from the extension above and its
token from $CRUCIBLE_TOKEN_DIR/<spoke>/token in that pod (default
/var/run/secrets/crucible).

With --server-pins it prints the consumer's server pins for the clusters (a
JSON document, key server-pins.json of the same ConfigMap): per spoke its
server, CA (ca_file) and token audience. A ClusterProfile writer chooses
which spoke; the pins, on the consumer's side, decide where its token may go:
credential refuses a ClusterProfile whose server, CA or audience differs.

With --consumer-values it prints the consumer pod's side, as YAML fragments
for the consumer's own chart values (a chart cannot change another release's
Deployment): volumes (one projected token per spoke, audience = the spoke's;
the ConfigMap crucible-clusterprofile-providers; with an absolute --command an
emptyDir) and initContainers (crucible's image, --image or the profile's
[pods] push_image, copying crucible into that emptyDir, as work pods get it)
for the pod; volumeMounts (the tokens at --token-dir/<spoke>, the provider file
at /etc/crucible/clusterprofile) and, with another --token-dir, env
(CRUCIBLE_TOKEN_DIR) for the container that runs the plugin. A bare --command
(crucible on the image's own PATH) needs no init container. See
docs/federation.md.`

// clusterProfileFlags are render clusterprofile's flags; each mode reads
// only some, and the others are refused rather than silently ignored.
type clusterProfileFlags struct {
	config, command, tokenDir, image string
	pinsPath                         string
	opts                             render.ProfileOptions
	clusters, audiences              []string
	providerFile, consumerValues     bool
	serverPins                       bool
}

func newRenderClusterProfileCmd() *cobra.Command {
	var fl clusterProfileFlags
	cmd := &cobra.Command{
		Use:   "clusterprofile --config FILE [--namespace NS] | --provider-file | --server-pins --config FILE | --consumer-values --config FILE",
		Short: "Print a ClusterProfile per spoke, the consumer's provider file, or its pod's values, for MultiKueue and any KEP-4322 consumer",
		Long:  clusterProfileLong,
		Example: `  # every spoke, for MultiKueue (which reads ClusterProfiles in its own namespace)
  crucible render clusterprofile --config crucible.toml --namespace kueue-system > profiles.yaml
  kubectl --context hub apply -f profiles.yaml
  kubectl --context hub apply --server-side --subresource=status -f profiles.yaml

  # the consumer's provider file and server pins, as the ConfigMap the consumer mounts
  crucible render clusterprofile --provider-file > providers.json
  crucible render clusterprofile --config crucible.toml --server-pins > server-pins.json
  kubectl --context hub -n kueue-system create configmap crucible-clusterprofile-providers \
    --from-file=providers.json --from-file=server-pins.json

  # the consumer pod's volumes, mounts and init container, for its own chart's values
  crucible render clusterprofile --config crucible.toml --consumer-values \
    --image registry.example.com/crucible/crucible:v1 > kueue-crucible-values.yaml`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return fl.checkMode(cmd)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out []byte
			var err error
			switch {
			case fl.providerFile:
				out, err = render.ProviderFile(fl.opts.Provider, fl.command, fl.pinsPath)
				if err != nil {
					err = fmt.Errorf("--provider-name, --command, --server-pins-path: %w", err)
				}
			case fl.serverPins:
				out, err = fl.pins()
			case fl.consumerValues:
				out, err = fl.consumerPod(cmd)
			default:
				out, err = fl.profiles()
			}
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.config, "config", "", "the controller's profile (TOML; required unless --provider-file)")
	f.StringArrayVar(&fl.clusters, "cluster", nil, "only this spoke (repeatable; default every cluster of the profile)")
	f.StringArrayVar(&fl.audiences, "audience", nil, "NAME=AUD: spoke NAME's token audience, where the hub chart's spokes[].audience overrides its name (repeatable)")
	f.StringVar(&fl.opts.Namespace, "namespace", "crucible", "the hub namespace of the ClusterProfiles (the consumer's: kueue-system for MultiKueue)")
	f.StringVar(&fl.opts.Provider, "provider-name", render.AccessProviderName, "the access provider's name, in the ClusterProfiles' status and in the provider file")
	f.StringVar(&fl.opts.ClusterManager, "cluster-manager", render.ClusterManagerName, "the ClusterProfiles' spec.clusterManager.name and x-k8s.io/cluster-manager label")
	f.BoolVar(&fl.providerFile, "provider-file", false, "print the consumer's provider file (JSON) instead of the ClusterProfiles")
	f.BoolVar(&fl.serverPins, "server-pins", false, "print the consumer's server pins (JSON: per spoke its server, CA and token audience; the file credential --server-pins reads) instead")
	f.StringVar(&fl.pinsPath, "server-pins-path", render.ServerPinsPath, "with --provider-file: where the consumer's pod has the server pins file (passed as credential --server-pins)")
	f.BoolVar(&fl.consumerValues, "consumer-values", false, "print the consumer pod's volumes, volume mounts and init container (YAML for its chart's values) instead")
	f.StringVar(&fl.command, "command", render.ConsumerCommand, "with --provider-file or --consumer-values: crucible as the consumer's pod runs it (an absolute path, filled by the init container, or a name on the image's PATH)")
	f.StringVar(&fl.tokenDir, "token-dir", render.ConsumerTokenDir, "with --consumer-values: where the spokes' tokens are mounted (<dir>/<cluster>/token; anything else is set as CRUCIBLE_TOKEN_DIR)")
	f.StringVar(&fl.image, "image", "", "with --consumer-values: crucible's image, for the init container (default the profile's [pods] push_image)")
	return cmd
}

// modeFlags are the flags each mode reads besides --config; the rest are
// refused, so that a flag given for another mode is not silently dropped.
var modeFlags = map[string][]string{
	"":                  {"cluster", "audience", "namespace", "provider-name", "cluster-manager"},
	"--provider-file":   {"provider-name", "command", "server-pins-path"},
	"--server-pins":     {"cluster", "audience"},
	"--consumer-values": {"cluster", "audience", "command", "token-dir", "image"},
}

func (fl *clusterProfileFlags) checkMode(cmd *cobra.Command) error {
	var modes []string
	for name, on := range map[string]bool{"--provider-file": fl.providerFile, "--server-pins": fl.serverPins, "--consumer-values": fl.consumerValues} {
		if on {
			modes = append(modes, name)
		}
	}
	slices.Sort(modes)
	mode := ""
	switch len(modes) {
	case 0:
	case 1:
		mode = modes[0]
	default:
		return fmt.Errorf("%s: one of them only (each prints a file of its own)", strings.Join(modes, ", "))
	}
	if !fl.providerFile && fl.config == "" {
		return fmt.Errorf("--config: required (the profile whose clusters to render)")
	}
	var stray []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Name != "config" && f.Name != strings.TrimPrefix(mode, "--") && !slices.Contains(modeFlags[mode], f.Name) {
			stray = append(stray, "--"+f.Name)
		}
	})
	if len(stray) == 0 {
		return nil
	}
	what := mode
	if what == "" {
		what = "the ClusterProfiles"
	}
	return fmt.Errorf("%s: not used by %s (it reads %s)", strings.Join(stray, ", "), what, "--"+strings.Join(modeFlags[mode], ", --"))
}

// pins is the consumer's server pins file for the picked clusters.
func (fl *clusterProfileFlags) pins() ([]byte, error) {
	clusters, _, err := fl.accessClusters(true)
	if err != nil {
		return nil, err
	}
	out, err := render.ServerPinsFile(clusters)
	if err != nil {
		return nil, fmt.Errorf("--server-pins: %w", err)
	}
	return out, nil
}

// profiles is the ClusterProfiles of the picked clusters, as one stream.
func (fl *clusterProfileFlags) profiles() ([]byte, error) {
	if err := fl.opts.Validate(); err != nil {
		return nil, fmt.Errorf("--namespace, --provider-name, --cluster-manager: %w", err)
	}
	clusters, _, err := fl.accessClusters(true)
	if err != nil {
		return nil, err
	}
	objs := make([]runtime.Object, 0, len(clusters))
	for _, c := range clusters {
		cp, err := render.ClusterProfile(c, fl.opts)
		if err != nil {
			return nil, err
		}
		objs = append(objs, cp)
	}
	return render.YAML(objs...)
}

// pickClusters is the profile's clusters named by the flags, in the
// profile's order, or all of them; an unknown name is refused with the
// names there are.
func pickClusters(p *profile.Profile, config string, names []string) ([]profile.ClusterEntry, error) {
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
	var picked []profile.ClusterEntry
	for _, c := range p.Clusters {
		if slices.Contains(names, c.Name) {
			picked = append(picked, c)
		}
	}
	return picked, nil
}

// accessClusters is the picked clusters with their --audience and, for
// ClusterProfiles (withCA), their ca_file's bytes, read here so that render
// stays free of I/O.
func (fl *clusterProfileFlags) accessClusters(withCA bool) ([]render.AccessCluster, *profile.Profile, error) {
	p, err := profile.Load(fl.config)
	if err != nil {
		return nil, nil, fmt.Errorf("--config: %w", err)
	}
	picked, err := pickClusters(p, fl.config, fl.clusters)
	if err != nil {
		return nil, nil, err
	}
	audiences, err := parseAudiences(fl.audiences, picked)
	if err != nil {
		return nil, nil, err
	}
	out := make([]render.AccessCluster, 0, len(picked))
	for _, c := range picked {
		ac := render.AccessCluster{Name: c.Name, Server: c.Server, Audience: audiences[c.Name]}
		if withCA && c.CAFile != "" {
			if ac.CAPEM, err = os.ReadFile(c.CAFile); err != nil {
				return nil, nil, fmt.Errorf("cluster %s: ca_file: %w", c.Name, err)
			}
		}
		out = append(out, ac)
	}
	return out, p, nil
}

// parseAudiences reads --audience NAME=AUD flags, each naming one of the
// picked clusters once.
func parseAudiences(flags []string, picked []profile.ClusterEntry) (map[string]string, error) {
	out := map[string]string{}
	for _, arg := range flags {
		name, aud, ok := strings.Cut(arg, "=")
		if !ok || aud == "" {
			return nil, fmt.Errorf("--audience %q: want NAME=AUDIENCE", arg)
		}
		if !slices.ContainsFunc(picked, func(c profile.ClusterEntry) bool { return c.Name == name }) {
			return nil, fmt.Errorf("--audience %q: %s is not one of the clusters rendered", arg, name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--audience %q: %s given twice", arg, name)
		}
		out[name] = aud
	}
	return out, nil
}
