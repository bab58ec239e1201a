// Package cli owns crucible's command line: the cobra command tree, its flags
// and help. Commands parse and print; the work is done by the packages they
// call.
package cli

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is stamped at build time with -ldflags "-X crucible.dev/crucible/internal/cli.Version=…".
var Version = "dev"

// Run executes the command line args. servers are the server processes'
// commands (crucible controller), which main adds: they live with their
// servers so that this package, the client, links none of them.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, servers ...*cobra.Command) error {
	// The client commands' flags bind package variables (devDir,
	// credentials): cleared when Run returns, so that one invocation's
	// --dev or --token never reaches code that runs after it in the same
	// process (the tests run many).
	defer func() { devDir, credentials = "", apiCredentials{} }()
	root := newRoot()
	root.AddCommand(servers...)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "crucible",
		Short: "Run a hub controller's work pods on spoke clusters with zero stored credentials",
		Long: `crucible lets a hub Kubernetes controller create, watch, stream and collect work
pods on spoke clusters (where the GPUs are) without storing a kubeconfig or token
for any of them. The controller reaches each spoke with its own projected,
auto-rotating service-account token; the spoke's API server asks crucible's
authn webhook to check it against the hub's keys, which the webhook reads from
the controller's read-only OIDC discovery mirror. Pods push results back to the
controller's drop-box with their own spoke tokens, checked by TokenReview.

Start a local hub and spoke (real kube-apiservers) with:

  crucible dev up`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd(), newDevCmd(), newWebhookCmd(),
		newSubmitCmd(), newClassesCmd(), newCapacityCmd(), newPodsCmd(), newLogsCmd(), newPushCmd(), newCopySelfCmd(), newArtifactsCmd(), newPortForwardCmd(), newRunLiveCmd(), newRenderCmd(),
		newCredentialCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print crucible's version and the Go toolchain it was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			goVersion := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "crucible %s (%s)\n", Version, goVersion)
			return err
		},
	}
}
