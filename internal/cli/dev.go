package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/profile"
)

// defaultDevDir is where `crucible dev up` keeps its stack unless told
// otherwise; client commands read the stack's env file from there only when
// given --dev (readDevServer).
const defaultDevDir = ".dev"

func newDevCmd() *cobra.Command {
	dev := &cobra.Command{
		Use:   "dev",
		Short: "Run a local hub and spoke clusters (real kube-apiservers) for development",
		Long: `dev runs a local hub and spoke clusters on loopback: one etcd, a hub
kube-apiserver and, per spoke, a kube-apiserver, kube-scheduler,
kube-controller-manager, kwok as the node and crucible's dev runtime as its
kubelet: every pod's first container's command runs as a local process (the
image is ignored), so pods are scheduled, run, finish with their exit code and
serve their logs. The binaries come from "make tools".`,
	}
	dev.AddCommand(newDevUpCmd(), newDevDownCmd(), newDevRefreshTokensCmd(), newDevRuntimeCmd())
	return dev
}

func newDevUpCmd() *cobra.Command {
	var (
		dir       string
		spokes    []string
		detach    bool
		toolsDir  string
		crucible  string
		noFed     bool
		sample    bool
		noMntNS   bool
		gpuNodes  string
		perServer int
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local hub and spokes; Ctrl-C stops them (or --detach and later dev down)",
		Long: `up starts the stack and writes into --dir:

  hub.kubeconfig, <spoke>.kubeconfig   admin kubeconfigs
  ca.crt                               the CA of every certificate in the stack
  env                                  shell exports: HUB_KUBECONFIG, <SPOKE>_KUBECONFIG, servers
  logs/                                one log per process
  pods/<spoke>/                        each pod's log (CRI format), written by the dev runtime
  crucible/                            the controller's hub token, the webhooks' configs

Besides the clusters it runs the federation: the crucible controller on the hub
(its discovery mirror on the external listener) and an authn webhook per spoke,
which the spoke's kube-apiserver asks about bearer tokens, so the hub's
crucible/crucible-controller token with audience <spoke> works on that spoke.

In the foreground (the default) it runs until Ctrl-C, then stops everything.
With --detach it returns once the stack is ready; stop it with
"crucible dev down --dir DIR".

--spokes takes either a count or names. A count N (1 to 30) runs N spokes
named wharf, dock, pier, quay, jetty, berth, slip, mole, marina, haven, then
spoke-11, spoke-12, ...; names (DNS labels, comma-separated) run those. Once
the stack is ready, up prints the resident memory of each spoke's processes
and of the shared ones (etcd, the hub, the controller): what one more spoke
costs on this machine.

--spokes-per-server K (default 1) lets K spokes share one API server, so that a
fleet of a hundred fits on this machine: --spokes 100 --spokes-per-server 25
runs 4 API servers (wharf, jetty, spoke-11 ... every 25th spoke runs one, the
next 24 are its guests), up to 30 API servers. To the controller each spoke is
a cluster of its own: its own audience and token, its own loop namespace
loops-<spoke> with its own turn service account and RBAC, its own provider in
the webhook of the server it shares. A guest has no nodes, no capacity view
and no --gpu-nodes of its own (it shares its host's); all spokes of a server
map to one user there, so this is a rig for measuring crucible's cost per spoke
(docs/dev-runtime.md), not tenancy.

--gpu-nodes gives spokes GPU nodes: SPOKE=NODESxGPUS[:PRODUCT], comma-separated,
e.g. wharf=1x4,dock=2x8:NVIDIA-H100-80GB-HBM3 (NODES from 1 to 64, GPUS per node
from 1 to 16, PRODUCT the nodes' nvidia.com/gpu.product label, as NVIDIA's GPU
feature discovery sets it; default NVIDIA-A100-SXM4-80GB). Each GPU node is
tainted nvidia.com/gpu=present:NoSchedule; every spoke keeps its CPU node, and a
spoke the flag does not name has no GPU node. Without it wharf has one node of
4 GPUs. The gpu and gpu-short classes are offered on the spokes with GPU nodes.

The stack's profile says default_cluster = "auto": a submit that names no
cluster is placed where it fits now (crucible capacity shows where that is),
and every spoke has capacity = true.`,
		Example: `  crucible dev up
  crucible dev up --spokes wharf,dock --detach --dir /tmp/stack && source /tmp/stack/env
  crucible dev up --spokes 10 --detach --dir /tmp/fleet    # wharf, dock, pier, ... haven
  crucible dev up --spokes 100 --spokes-per-server 25 --detach --dir /tmp/fleet100
  crucible dev up --spokes 3 --gpu-nodes wharf=1x4,dock=2x8:NVIDIA-H100-80GB-HBM3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if perServer < 1 {
				return fmt.Errorf("--spokes-per-server %d: at least 1 (each spoke its own API server)", perServer)
			}
			names, err := parseSpokes(spokes, perServer)
			if err != nil {
				return err
			}
			var pools []devstack.GPUPool
			if cmd.Flags().Changed("gpu-nodes") {
				if pools, err = devstack.ParseGPUNodes(gpuNodes, names); err != nil {
					return err
				}
			}
			if alive, err := devstack.RunningIn(dir); err == nil && len(alive) > 0 {
				return fmt.Errorf("a dev stack is already running in %s (%s): stop it with \"crucible dev down --dir %s\"", dir, strings.Join(alive, ", "), dir)
			} else if err != nil && !errors.Is(err, devstack.ErrNoStack) {
				return err
			}
			opts := devstack.Options{
				Dir:                 dir,
				DefaultCluster:      profile.AutoCluster, // a submit naming no spoke is placed where it fits
				Detached:            detach,
				NoPodMountNamespace: noMntNS,
				Progress: func(format string, args ...any) {
					fmt.Fprintf(cmd.ErrOrStderr(), "dev: "+format+"\n", args...)
				},
			}
			if toolsDir != "" {
				opts.Tools = devstack.Tools{Dir: toolsDir}
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the crucible binary to run the dev runtime, controller and webhooks: %w", err)
			}
			if crucible == "" {
				crucible = exe
			}
			opts.RuntimeBinary = crucible
			if !noFed {
				opts.Crucible = crucible
			}
			opts.Spokes = devstack.NamedSpokes(names...)
			opts.SpokesPerServer = perServer
			if pools != nil {
				devstack.WithGPUNodes(opts.Spokes, pools)
			}
			stack, err := devstack.Start(cmd.Context(), opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			printStack(out, stack)
			if costs, err := stack.Costs(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "dev: cannot measure the stack's memory: %v\n", err)
			} else {
				printCosts(out, costs)
			}
			if sample && stack.Federation != nil {
				if err := runSample(cmd, stack); err != nil {
					stack.Stop()
					return fmt.Errorf("sample work pod: %w", err)
				}
			}
			if detach {
				fmt.Fprintf(out, "stop it with: crucible dev down --dir %s\n", dir)
				return nil
			}
			return runInForeground(cmd, stack)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultDevDir, "directory for the stack's kubeconfigs, certificates, logs and data")
	cmd.Flags().StringSliceVar(&spokes, "spokes", []string{devstack.DefaultSpokeName}, "spoke clusters to run: a count N (1-"+strconv.Itoa(maxSpokeCount)+"; wharf, dock, pier, ...) or names (DNS labels)")
	cmd.Flags().IntVar(&perServer, "spokes-per-server", 1, "spokes sharing one API server (the first of each group runs it); above 1 each spoke's loop namespace is loops-<spoke>")
	cmd.Flags().StringVar(&gpuNodes, "gpu-nodes", "", "GPU nodes per spoke: SPOKE=NODESxGPUS[:PRODUCT],... e.g. wharf=1x4,dock=2x8:NVIDIA-H100-80GB-HBM3 (default: wharf=1x4)")
	cmd.Flags().BoolVar(&detach, "detach", false, "return once the stack is ready and leave it running")
	cmd.Flags().BoolVar(&sample, "sample", false, "once the stack is ready, run a sample turn: follow its log live, then show its state, collected log and artifacts")
	cmd.Flags().BoolVar(&noMntNS, "no-pod-mount-namespace", false, "run pods without a private mount namespace even as root: volumes stay in each pod's directory and env values naming a mountPath point there")
	cmd.Flags().BoolVar(&noFed, "no-federation", false, "run only the clusters: no crucible controller, no authn webhooks")
	cmd.Flags().StringVar(&crucible, "crucible-binary", "", "crucible binary that runs the controller, webhooks and dev runtime (default: this one)")
	cmd.Flags().StringVar(&toolsDir, "tools-dir", "", "where \"make tools\" put kube-apiserver, etcd and kwok (default: bin/ of the repository, or $CRUCIBLE_TOOLS_DIR)")
	return cmd
}

// runInForeground keeps the stack up until Ctrl-C, then stops it.
func runInForeground(cmd *cobra.Command, stack *devstack.Stack) error {
	fmt.Fprintln(cmd.OutOrStdout(), "Ctrl-C stops the stack.")
	<-cmd.Context().Done()
	fmt.Fprintln(cmd.ErrOrStderr(), "dev: stopping the stack")
	stack.Stop()
	_, err := devstack.StopDir(stack.Dir, nil) // clears the state record; processes are already gone
	return err
}

// printStack tells where the stack's parts listen and where their
// kubeconfigs are.
func printStack(out io.Writer, stack *devstack.Stack) {
	fmt.Fprintf(out, "hub    %s  kubeconfig %s\n", stack.Hub.Server, stack.Hub.KubeconfigFile)
	for _, s := range stack.Spokes {
		fmt.Fprintf(out, "%-6s %s  kubeconfig %s\n", s.Name, s.Server, s.KubeconfigFile)
	}
	if f := stack.Federation; f != nil {
		fmt.Fprintf(out, "controller  internal %s  external %s\n", f.ControllerInternalURL, f.ControllerExternalURL)
	}
	dev := "--dev"
	if stack.Dir != defaultDevDir {
		dev += "=" + stack.Dir
	}
	fmt.Fprintf(out, "\nsource %s/%s for the addresses ($CRUCIBLE_API for the client commands), or give them %s.\n",
		stack.Dir, devstack.EnvFile, dev)
}

// maxSpokeCount caps --spokes N: ten spokes fit on two cores and 24 GiB
// (docs/dev-runtime.md), and a slip of the finger (100) should not start a
// hundred API servers.
const maxSpokeCount = 30

// countPattern tells a count from a name: a DNS label may be all digits,
// but "--spokes 3" means three spokes.
var countPattern = regexp.MustCompile(`^[+-]?[0-9]+$`)

// parseSpokes reads --spokes: one count, which devstack.SpokeNames turns
// into names, or a list of names. It reports every bad value at once.
func parseSpokes(values []string, perServer int) ([]string, error) {
	flag := "--spokes " + strconv.Quote(strings.Join(values, ","))
	if len(values) == 0 {
		return nil, fmt.Errorf("%s: give a count (--spokes 3) or names (--spokes wharf,dock)", flag)
	}
	if len(values) == 1 && countPattern.MatchString(values[0]) {
		n, err := strconv.Atoi(values[0])
		if err != nil || n < 1 || n > maxSpokeCount*perServer {
			shared := ""
			if perServer > 1 {
				shared = fmt.Sprintf(" (%d API servers of %d spokes)", maxSpokeCount, perServer)
			}
			return nil, fmt.Errorf("%s: a count of spokes is from 1 to %d%s", flag, maxSpokeCount*perServer, shared)
		}
		return devstack.SpokeNames(n), nil
	}
	var errs []error
	seen := map[string]bool{}
	for _, name := range values {
		switch {
		case countPattern.MatchString(name):
			errs = append(errs, fmt.Errorf("%q is a number: give a count alone, or only names", name))
		case len(validation.IsDNS1123Label(name)) > 0:
			errs = append(errs, fmt.Errorf("%q is no spoke name: %s", name, strings.Join(validation.IsDNS1123Label(name), "; ")))
		case seen[name]:
			errs = append(errs, fmt.Errorf("%q is named twice", name))
		}
		seen[name] = true
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", flag, errors.Join(errs...))
	}
	return values, nil
}

// printCosts says what the stack holds in memory at start, per spoke and
// for the shared parts, so that one can tell how many more spokes fit:
// about a spoke's private memory each, since processes of one binary share
// its pages, which RSS counts in every one of them.
func printCosts(out io.Writer, costs []devstack.Cost) {
	fmt.Fprintln(out, "\nmemory at start: resident (RSS), of it private (anonymous: what one more spoke adds)")
	var spokes, private, shared int64
	n, servers := 0, 0
	label := func(c devstack.Cost) string {
		switch {
		case c.Spoke == "":
			return "shared"
		case len(c.Guests) > 0:
			return c.Spoke + " +" + strconv.Itoa(len(c.Guests))
		}
		return c.Spoke
	}
	width := 10 // the labels' column: spoke-26 +24 is wider
	for _, c := range costs {
		width = max(width, len(label(c)))
	}
	for _, c := range costs {
		if c.Spoke != "" {
			spokes += c.RSS()
			private += c.Anon()
			n += 1 + len(c.Guests)
			servers++
		} else {
			shared += c.RSS()
		}
		parts := make([]string, len(c.Processes))
		for i, p := range c.Processes {
			name := p.Name
			if c.Spoke != "" {
				name = strings.TrimSuffix(name, "-"+c.Spoke)
			}
			if p.Exited {
				parts[i] = name + " exited"
				continue
			}
			parts[i] = name + " " + strconv.FormatInt(p.RSS>>20, 10)
		}
		fmt.Fprintf(out, "  %-*s %8s, private %8s  (RSS MiB: %s)\n", width, label(c), mib(c.RSS()), mib(c.Anon()), strings.Join(parts, ", "))
	}
	if servers > 0 && servers != n {
		fmt.Fprintf(out, "  %-*s %8s  (%d API servers %s for %d spokes: a server %s, private %s; a spoke %s; shared %s)\n",
			width, "total", mib(spokes+shared), servers, mib(spokes), n, mib(spokes/int64(servers)), mib(private/int64(servers)), mib(spokes/int64(n)), mib(shared))
		return
	}
	if n > 0 {
		fmt.Fprintf(out, "  %-*s %8s  (%d spokes %s, a spoke %s, private %s; shared %s)\n",
			width, "total", mib(spokes+shared), n, mib(spokes), mib(spokes/int64(n)), mib(private/int64(n)), mib(shared))
	}
}

// mib formats bytes as whole MiB.
func mib(bytes int64) string { return strconv.FormatInt(bytes>>20, 10) + " MiB" }

func newDevDownCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop a stack started with dev up --detach",
		Long: `down stops every process recorded in DIR/stack.json (by PID, and only if the
process still belongs to that stack) and deletes etcd's data. Kubeconfigs and
logs stay in DIR.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stopped, err := devstack.StopDir(dir, func(format string, args ...any) {
				fmt.Fprintf(cmd.ErrOrStderr(), "dev: "+format+"\n", args...)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stopped %d processes of the stack in %s\n", len(stopped), dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultDevDir, "directory of the stack to stop")
	return cmd
}

// newDevRefreshTokensCmd is the kubelet stand-in of a detached stack: it
// rewrites the controller's projected tokens before they expire.
func newDevRefreshTokensCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "refresh-tokens --dir DIR",
		Short:  "Keep a detached dev stack's controller tokens fresh (started by dev up --detach)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return devstack.RunTokenRefresher(cmd.Context(), dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultDevDir, "directory of the stack")
	return cmd
}

// newDevRuntimeCmd is the kubelet stand-in of a detached stack's spokes: it
// runs their pods as local processes until stopped, then kills them.
func newDevRuntimeCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "runtime --dir DIR",
		Short:  "Run a detached dev stack's pods as local processes (started by dev up --detach)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return devstack.RunRuntime(cmd.Context(), dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", defaultDevDir, "directory of the stack")
	return cmd
}
