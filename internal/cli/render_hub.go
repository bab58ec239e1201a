package cli

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spf13/cobra"

	"crucible.dev/crucible/internal/render"
)

func newRenderHubCmd() *cobra.Command {
	var namespace, serviceAccount string
	var tokenRequest bool
	var clusterProfiles string
	cmd := &cobra.Command{
		Use:   "hub [--namespace NS] [--service-account SA] [--token-request] [--cluster-profiles NS]",
		Short: "Print the hub RBAC of the API's auth and example ClusterRoles (R-C12)",
		Long: `hub prints, for kubectl apply on the hub:

  ClusterRole crucible-controller-api-auth, bound to the controller's service account
    tokenreviews (authentication.k8s.io)          create  (api.auth "kubernetes")
    subjectaccessreviews (authorization.k8s.io)   create  (api.auth "kubernetes" and "proxy")
  ClusterRole crucible-viewer      workpods get list; workpods/log, workpods/artifacts get
  ClusterRole crucible-submitter   the viewer's rules and workpods create (submit)
  ClusterRole crucible-admin       the viewer's rules and workpods create delete (cancel)

With --token-request, for spokes with token_source = "request" (the controller
asks the hub's TokenRequest API for its own tokens), also:

  Role crucible-controller-token-request in the namespace, bound to the controller's service account
    serviceaccounts/token   create   resourceNames: [the service account]

With --cluster-profiles NS, for a fleet read from ClusterProfiles ([fleet]
cluster_profiles = "NS"; its spokes' tokens are requested, so add
--token-request too), also:

  Role crucible-controller-cluster-profiles in NS, bound to the controller's service account
    clusterprofiles (multicluster.x-k8s.io)   get list watch

workpods are in the API group crucible.dev; the cluster a work pod runs on is
the resource name, so a role with resourceNames: [wharf] covers only wharf.
Grant people the example roles with a RoleBinding in the profile's
api.namespace (default "crucible") or a ClusterRoleBinding.`,
		Example: `  crucible render hub | kubectl --context hub apply -f -
  kubectl --context hub -n crucible create rolebinding alice-submits --clusterrole crucible-submitter --user alice@example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if namespace == "" || serviceAccount == "" {
				return errors.New("--namespace and --service-account must not be empty")
			}
			objs := render.HubRBAC(namespace, serviceAccount)
			if tokenRequest {
				objs = append(objs, render.HubTokenRequestRBAC(namespace, serviceAccount)...)
			}
			if clusterProfiles != "" {
				if e := validation.IsDNS1123Label(clusterProfiles); len(e) > 0 {
					return fmt.Errorf("--cluster-profiles %q: %s", clusterProfiles, strings.Join(e, "; "))
				}
				objs = append(objs, render.HubClusterProfilesRBAC(clusterProfiles, namespace, serviceAccount)...)
			}
			out, err := render.YAML(objs...)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().StringVar(&namespace, "namespace", "crucible", "the controller's namespace on the hub")
	cmd.Flags().StringVar(&serviceAccount, "service-account", "crucible-controller", "the controller's service account on the hub")
	cmd.Flags().StringVar(&clusterProfiles, "cluster-profiles", "", "also let the controller read the ClusterProfiles of this hub namespace ([fleet] cluster_profiles)")
	cmd.Flags().BoolVar(&tokenRequest, "token-request", false, "also let the controller ask the TokenRequest API for its own tokens (clusters with token_source = \"request\")")
	return cmd
}
