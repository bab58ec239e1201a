package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"crucible.dev/crucible/internal/podclass"
	"crucible.dev/crucible/internal/profile"
	"crucible.dev/crucible/internal/render"
	"crucible.dev/crucible/internal/workpod"
)

// defaultControllerUsername is the name a spoke's authn webhook maps the hub
// controller's token to with the default "hub:" username prefix.
const defaultControllerUsername = "hub:system:serviceaccount:crucible:crucible-controller"

func newRenderCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Print the Kubernetes objects crucible's fleet needs, as YAML",
		Long: `render prints, as a YAML stream for kubectl apply, the objects crucible
would create on a spoke or needs on the hub, from the same profile the
controller reads (--config; see docs/config.md). Nothing is sent to any
cluster.

  turn            a work pod as the controller dispatches it
  spoke           the loop namespace and the RBAC the controller's identity
                  (and any --subject) needs on a spoke
  hub             the hub RBAC of the API's auth and example roles for people
  clusterprofile  a ClusterProfile per spoke with crucible as its access
                  provider, or the consumer's provider file`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newRenderTurnCmd(), newRenderSpokeCmd(), newRenderHubCmd(), newRenderClusterProfileCmd())
	return cmd
}

// renderFlags are the flags every render subcommand has.
type renderFlags struct {
	config, cluster string
}

func (f *renderFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.config, "config", "", "the controller's profile (TOML; required)")
	cmd.Flags().StringVar(&f.cluster, "cluster", "", "the spoke to render for (default: the profile's default_cluster)")
	_ = cmd.MarkFlagRequired("config")
}

// load reads the profile and picks the cluster.
func (f *renderFlags) load() (*profile.Profile, profile.ClusterEntry, error) {
	p, err := profile.Load(f.config)
	if err != nil {
		return nil, profile.ClusterEntry{}, fmt.Errorf("--config: %w", err)
	}
	c, ok := p.Cluster(f.cluster)
	if !ok {
		var names []string
		for _, e := range p.Clusters {
			names = append(names, e.Name)
		}
		return nil, profile.ClusterEntry{}, fmt.Errorf("--cluster %q: no such cluster in %s (it has: %s)", f.cluster, f.config, strings.Join(names, ", "))
	}
	return p, c, nil
}

func newRenderTurnCmd() *cobra.Command {
	var (
		rf   renderFlags
		cf   classFlags
		w    = workpod.WorkPod{}
		envs []string
	)
	cmd := &cobra.Command{
		Use:   "turn --config FILE --image IMAGE [flags] [-- COMMAND [ARG...]]",
		Short: "Print a work pod as the controller would dispatch it",
		Long: `turn prints the Pod that the controller creates on a spoke for a work pod:
in the cluster's loop_namespace, running as its turn_service_account without
the API token, with the origin labels (app.kubernetes.io/managed-by=crucible,
crucible.dev/instance, crucible.dev/work-pod, crucible.dev/kind), the
environment variables CRUCIBLE_INGEST_URL (the cluster's ingest_url),
CRUCIBLE_INGEST_TOKEN_FILE and CRUCIBLE_WORK_POD, and an ingest token
projected for the cluster's ingest_audience at
/var/run/secrets/crucible/ingest/token. [pods] in the profile sets the
token's lifetime and the image pull policy; the pod class (--class, else the
kind's default, as the cluster offers it) its resources, tolerations, node
selector and affinity, priority and runtime class, deadline, /dev/shm and
non-root securityContext, and --gpus, --cpu, --memory, --resource and
--deadline change it within the class's bounds, as the API would. (Files and
secret files, which become a ConfigMap and a Secret owned by the pod, are
only given through the API.)

Everything after "--" is the container's command (the first word) and its
arguments; without it the image's entrypoint runs.`,
		Example: `  # the example profile's only spoke
  crucible render turn --config examples/crucible.toml --image busybox -- sh -c 'echo hello'

  # a loop pod on a named spoke, with environment variables
  crucible render turn --config crucible.toml --cluster wharf --kind loop --id loop-1 \
    --image ghcr.io/example/agent:1.2 --env MODEL=m1 --env STEPS=10 -- agent --loop

  # a 2-GPU pod of the class "gpu" for at most 6 hours
  crucible render turn --config crucible.toml --class gpu --gpus 2 --memory 32Gi --deadline 6h \
    --image ghcr.io/example/train:1 -- python train.py

  # create it by hand
  crucible render turn --config crucible.toml --image busybox -- true | kubectl apply -f -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); (dash < 0 && len(args) > 0) || dash > 0 {
				return fmt.Errorf("unexpected argument %q: put the pod's command after \"--\"", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				w.Command, w.Args = args[:1], args[1:]
			}
			for _, kv := range envs {
				name, value, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("--env %q: want NAME=VALUE", kv)
				}
				w.Env = append(w.Env, workpod.EnvVar{Name: name, Value: value})
			}
			p, c, err := rf.load()
			if err != nil {
				return err
			}
			if w.Shape, err = classShape(cmd, p, c, &cf, w.Kind); err != nil {
				return err
			}
			valid, errs := workpod.Check(w)
			if err := workPodFlagErrors(errs, envs); err != nil {
				return err
			}
			objs, err := render.Turn(c, p.Pods, p.Controller.Instance, valid)
			if err != nil {
				return err
			}
			out, err := render.YAML(objs.List()...)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	rf.add(cmd)
	cf.add(cmd)
	f := cmd.Flags()
	f.StringVar(&w.ID, "id", "turn-example", "the work pod's id, which is the pod's name (a DNS label)")
	f.StringVar(&w.Kind, "kind", workpod.KindTurn, `"turn" (a short pod) or "loop" (a long one)`)
	f.StringVar(&w.Image, "image", "", "the container image (required)")
	f.StringArrayVar(&envs, "env", nil, "an environment variable NAME=VALUE (repeatable; names starting with CRUCIBLE_ are reserved)")
	_ = cmd.MarkFlagRequired("image")
	return cmd
}

// classShape is the pod's shape from the flags' class on cluster c, each
// refusal named by its flag.
func classShape(cmd *cobra.Command, p *profile.Profile, c profile.ClusterEntry, cf *classFlags, kind string) (workpod.Shape, error) {
	class, err := p.ClassFor(c, cf.class, workpod.ShapeKind(kind))
	if err != nil {
		return workpod.Shape{}, fmt.Errorf("--class: %w", err)
	}
	shape, errs := podclass.Resolve(class, p.Pods.NodeSelector, cf.ask(cmd))
	if len(errs) > 0 {
		return workpod.Shape{}, cf.flagErrors(errs)
	}
	return shape, nil
}

// workPodFlagErrors reports workpod.Check's problems by the flag that set
// the bad value.
func workPodFlagErrors(problems field.ErrorList, envs []string) error {
	var errs []error
	for _, e := range problems {
		flag := "--" + e.Field // id, kind, image
		var i int
		if _, err := fmt.Sscanf(e.Field, "env[%d]", &i); err == nil && i < len(envs) {
			flag = fmt.Sprintf("--env %q", envs[i])
		}
		errs = append(errs, fmt.Errorf("%s: %s", flag, e.ErrorBody()))
	}
	return errors.Join(errs...)
}

func newRenderSpokeCmd() *cobra.Command {
	var (
		rf                    renderFlags
		withNamespace         bool
		username              string
		authn                 string
		trust                 render.HubTrust
		subject, mirrorCAFile string
		hook                  render.WebhookClient
		federated             []string
		allowClusterWide      bool
	)
	cmd := &cobra.Command{
		Use:   "spoke --config FILE [--cluster NAME] [--controller-username USER] [--subject NS/SA=RBAC...]",
		Short: "Print the loop namespace and the RBAC the controller's identity needs on a spoke (R-ID4)",
		Long: `spoke prints the cluster's loop namespace, labelled to enforce Pod Security
"restricted" (pod-security.kubernetes.io/enforce, warn and audit, version
latest: the pods crucible renders satisfy it, anything else the controller's
pods/create might make is refused), and exactly the permissions the hub
controller needs on a spoke, and nothing more, bound to the user name the
spoke's crucible authn webhook maps the controller's token to:

  Role crucible-controller in the cluster's loop_namespace
    pods        get list watch create delete   (dispatch, watch, reconcile, sweep)
    pods/log    get                            (log collection and live view)
    configmaps  create delete                  (a work pod's files)
    secrets     create delete                  (a work pod's secret files)
  ClusterRole crucible-controller
    tokenreviews (authentication.k8s.io) create  (the drop-box checks pod tokens)

each with a binding to the User --controller-username. The name is the
webhook provider's username claim mapping applied to the controller's
subject; with the example mapping (prefix "hub:") it is the default below.

--subject NS/SA=RBAC federates another hub service account (a MultiKueue
manager, Argo CD's application controller) to the spoke: the webhook (or
kube-apiserver's own authenticator) accepts its tokens too, and its RBAC is
bound to the User --username-prefix + system:serviceaccount:NS:SA, never to
the spoke's own account of that name (hub and spoke share the issuer). RBAC
is a preset, multikueue:NS[,NS...] (Kueue's documented worker-cluster role
in the namespaces MultiKueue dispatches to, plus the cluster-wide list and
watch of its kinds, pods excepted, that its watchers need) or
argocd:NS[,NS...] (Argo CD's namespace-scoped credential in those
namespaces), or a rules file. A preset never covers the cluster's
loop_namespace (crucible's work pods: other tenants' code, env and secret
files) unless --allow-cluster-wide is given; with it, multikueue without
namespaces is Kueue's role as a ClusterRole (docs/federation.md explains the
reach):

  namespaced:            # a Role and RoleBinding in each namespace
    <namespace>: [<rbacv1.PolicyRule>...]
  cluster: [<rbacv1.PolicyRule>...]   # a ClusterRole and ClusterRoleBinding

decoded strictly (an unknown key is an error naming its path). The objects
are named crucible-federated:NS:SA.`,
		Example: `  crucible render spoke --config examples/crucible.toml | kubectl --context wharf apply -f -

  # the spoke's authn-webhook configuration (shared issuer, ADR-0048), or kube-apiserver's own
  # AuthenticationConfiguration for a spoke whose issuer differs from the hub's. Run the webhook as
  # two or more replicas on different nodes, ready on /readyz, each with --state-dir on storage
  # that outlives the pod or --state-configmap NS/NAME (docs/install.md), so that one restarted
  # while the hub's mirror is unreachable still verifies with the keys it last fetched
  crucible render spoke --config crucible.toml --authn webhook > webhook.yaml
  crucible render spoke --config crucible.toml --authn builtin > authentication-config.yaml

  # the kubeconfig kube-apiserver reads with --authentication-token-webhook-config-file: the
  # webhook's URL and CA, and kube-apiserver's client certificate for it (paths, never key bytes)
  crucible render spoke --config crucible.toml --authn webhook-kubeconfig \
    --webhook-url https://127.0.0.1:9443/authenticate --webhook-ca-file /etc/crucible/webhook-ca.crt \
    --webhook-client-cert /etc/crucible/webhook-client.crt --webhook-client-key /etc/crucible/webhook-client.key \
    > webhook.kubeconfig

  # federate the hub's Kueue (MultiKueue's manager) to wharf: its RBAC, then the webhook's allowlist
  crucible render spoke --config crucible.toml --cluster wharf \
    --subject kueue-system/kueue-controller-manager=multikueue:batch,research | kubectl --context wharf apply -f -
  crucible render spoke --config crucible.toml --cluster wharf --authn webhook \
    --subject kueue-system/kueue-controller-manager=multikueue:batch,research > webhook.yaml

  # Argo CD in two namespaces, and a controller of your own with a rules file
  crucible render spoke --config crucible.toml --subject argocd/argocd-application-controller=argocd:apps,web \
    --subject tools/my-controller=./my-controller-rbac.yaml

  crucible render spoke --config crucible.toml --cluster wharf \
    --controller-username 'hub:system:serviceaccount:crucible--runtime-ext:crucible-crucible-controller'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(username) == "" {
				return errors.New("--controller-username: required")
			}
			p, c, err := rf.load()
			if err != nil {
				return err
			}
			fed := render.Federation{ControllerSubject: subject, ControllerUsername: username, UsernamePrefix: trust.UsernamePrefix}
			scope := render.PresetScope{LoopNamespace: c.LoopNamespace, AllowClusterWide: allowClusterWide}
			if fed.Subjects, err = federatedSubjects(federated, scope); err != nil {
				return err
			}
			if err := federationFlagErrors(fed.Check(), federated); err != nil {
				return err
			}
			var out []byte
			switch authn {
			case "rbac":
				objs := append(render.SpokeRBAC(c, username), fed.RBAC()...)
				if withNamespace {
					objs = append([]runtime.Object{render.LoopNamespace(c)}, objs...)
				}
				out, err = render.YAML(objs...)
			case "webhook", "builtin":
				trust.Audience, trust.AllowedSubjects = c.Name, fed.AllowedSubjects()
				if trust.DiscoveryURL == "" {
					trust.DiscoveryURL = strings.TrimRight(p.Controller.ExternalURL, "/") + "/.well-known/openid-configuration"
				}
				if mirrorCAFile != "" {
					ca, rerr := os.ReadFile(mirrorCAFile)
					if rerr != nil {
						return fmt.Errorf("--mirror-ca-file: %w", rerr)
					}
					trust.CertificateAuthority = string(ca)
				}
				if authn == "webhook" {
					out, err = render.WebhookConfig(trust)
				} else {
					out, err = render.AuthenticationConfiguration(trust)
				}
			case "webhook-kubeconfig":
				out, err = render.WebhookKubeconfig(hook)
			default:
				return fmt.Errorf("--authn %q: want rbac, webhook, webhook-kubeconfig or builtin", authn)
			}
			if errors.Is(err, render.ErrUsernamePrefix) {
				return fmt.Errorf("--username-prefix: %w", err)
			}
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	rf.add(cmd)
	cmd.Flags().BoolVar(&withNamespace, "namespace", true, "with --authn rbac: print the loop namespace with its Pod Security labels first (false when it is managed elsewhere; label it restricted there)")
	cmd.Flags().StringVar(&username, "controller-username", defaultControllerUsername, "the user name the spoke's authn webhook gives the controller")
	cmd.Flags().StringVar(&authn, "authn", "rbac", "what to print: rbac (the objects above), webhook (crucible authn-webhook's config file for this spoke), webhook-kubeconfig (the kubeconfig kube-apiserver uses to reach that webhook, with its client certificate) or builtin (kube-apiserver's AuthenticationConfiguration, for a spoke whose own issuer differs from the hub's)")
	cmd.Flags().StringArrayVar(&federated, "subject", nil, "federate another hub service account to this spoke: NS/SA=RBAC (or system:serviceaccount:NS:SA=RBAC), RBAC being a preset (multikueue:NS[,NS...], or argocd:NS[,NS...]) or a rules file (YAML or JSON: {namespaced: {NS: [rules]}, cluster: [rules]}; write ./multikueue for a file of that name). Adds it to the webhook's allowed subjects (--authn webhook, builtin) and prints its RBAC bound to --username-prefix + its subject (--authn rbac). Repeatable; see docs/federation.md")
	cmd.Flags().BoolVar(&allowClusterWide, "allow-cluster-wide", false, "let a --subject preset reach the cluster's loop_namespace: multikueue without namespaces (Kueue's ClusterRole), or a preset naming the loop namespace (see docs/federation.md for what that exposes)")
	cmd.Flags().StringVar(&subject, "hub-subject", "system:serviceaccount:crucible:crucible-controller", "with --authn: the controller's subject on the hub, the one subject the spoke accepts")
	cmd.Flags().StringVar(&trust.Issuer, "hub-issuer", "https://kubernetes.default.svc", "with --authn: the hub's service-account issuer")
	cmd.Flags().StringVar(&trust.UsernamePrefix, "username-prefix", "hub:", "with --authn: prefix of the mapped user name (must match --controller-username)")
	cmd.Flags().StringVar(&trust.DiscoveryURL, "discovery-url", "", "with --authn: the mirror's discovery URL (default: the profile's external_url + /.well-known/openid-configuration)")
	cmd.Flags().StringVar(&mirrorCAFile, "mirror-ca-file", "", "with --authn: CA bundle (PEM) that verifies the mirror, if not a public CA")
	cmd.Flags().StringVar(&hook.URL, "webhook-url", "https://127.0.0.1:9443/authenticate", "with --authn webhook-kubeconfig: the webhook's TokenReview URL as kube-apiserver reaches it (https)")
	cmd.Flags().StringVar(&hook.CAFile, "webhook-ca-file", "/etc/crucible/webhook-ca.crt", "with --authn webhook-kubeconfig: path, on the API server's host, of the CA that verifies the webhook's serving certificate")
	cmd.Flags().StringVar(&hook.ClientCertFile, "webhook-client-cert", "/etc/crucible/webhook-client.crt", "with --authn webhook-kubeconfig: path of kube-apiserver's client certificate for the webhook (from the webhook's --client-ca)")
	cmd.Flags().StringVar(&hook.ClientKeyFile, "webhook-client-key", "/etc/crucible/webhook-client.key", "with --authn webhook-kubeconfig: path of that certificate's key (the path is written, never the key)")
	return cmd
}

// federatedSubjects reads each --subject NS/SA=RBAC: the account, and its
// RBAC from a preset or a file, each refusal naming the flag's value and,
// for a file, the file.
func federatedSubjects(flags []string, scope render.PresetScope) ([]render.FederatedSubject, error) {
	var subs []render.FederatedSubject
	for _, arg := range flags {
		ref, spec, ok := strings.Cut(arg, "=")
		if !ok || spec == "" {
			return nil, fmt.Errorf("--subject %q: want NS/SA=RBAC, RBAC a preset (%s) or a rules file", arg, strings.Join(render.Presets, ", "))
		}
		ns, sa, err := render.ParseSubjectRef(ref)
		if err != nil {
			return nil, fmt.Errorf("--subject %q: %w", arg, err)
		}
		g, err := subjectGrants(spec, scope)
		if err != nil {
			return nil, fmt.Errorf("--subject %q: %w", arg, err)
		}
		subs = append(subs, render.FederatedSubject{Namespace: ns, ServiceAccount: sa, Grants: g})
	}
	return subs, nil
}

// subjectGrants is a preset's RBAC (multikueue, argocd:NS[,NS...]) or a
// rules file's. A preset's name wins over a file of the same name, which
// ./NAME reaches.
func subjectGrants(spec string, scope render.PresetScope) (render.Grants, error) {
	name, nsList, _ := strings.Cut(spec, ":")
	if slices.Contains(render.Presets, name) {
		var namespaces []string
		if nsList != "" {
			namespaces = strings.Split(nsList, ",")
		}
		return render.PresetGrants(name, namespaces, scope)
	}
	data, err := readRulesFile(spec)
	if err != nil {
		return render.Grants{}, err
	}
	g, err := render.ParseGrants(data)
	if err != nil {
		return render.Grants{}, fmt.Errorf("rules file %s: %w", spec, err)
	}
	return g, nil
}

// readRulesFile reads at most one byte more than render.MaxGrantsBytes, so
// a wrong path to something huge is refused without being read whole.
func readRulesFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, render.MaxGrantsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("rules file %s: %w", path, err)
	}
	return data, nil
}

// federationFlagErrors reports Federation.Check's problems by the flag
// that set the bad value: subjects[i] is the i-th --subject.
func federationFlagErrors(problems field.ErrorList, flags []string) error {
	var errs []error
	for _, e := range problems {
		flag := "--username-prefix"
		var i int
		if _, err := fmt.Sscanf(e.Field, "subjects[%d]", &i); err == nil && i < len(flags) {
			flag = fmt.Sprintf("--subject %q", flags[i])
			if _, rest, found := strings.Cut(e.Field, "]."); found {
				flag += " " + rest
			}
		}
		errs = append(errs, fmt.Errorf("%s: %s", flag, e.ErrorBody()))
	}
	return errors.Join(errs...)
}
