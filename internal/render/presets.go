package render

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// The built-in RBAC presets, for the hub controllers crucible's federation
// is meant for. The spoke chart's templates/_presets.tpl holds the same
// rules; a test compares the two.
const (
	PresetMultiKueue = "multikueue"
	PresetArgoCD     = "argocd"
)

// Presets are the preset names, for help texts and errors.
var Presets = []string{PresetMultiKueue, PresetArgoCD}

// createDeleteRead are the verbs MultiKueue's manager uses on the objects it
// mirrors to a worker.
var createDeleteRead = []string{"create", "delete", "get", "list", "watch"}

// multiKueueRule is the pair of rules MultiKueue's documented role gives
// each kind it dispatches: the objects themselves, and get on their status.
func multiKueueRule(group string, resources ...string) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, r := range resources {
		rules = append(rules,
			rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{r}, Verbs: createDeleteRead},
			rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{r + "/status"}, Verbs: []string{"get"}},
		)
	}
	return rules
}

// multiKueueRules is the role Kueue documents for the kubeconfig user of a
// MultiKueue worker cluster, rule for rule: "Setup a MultiKueue
// environment", https://kueue.sigs.k8s.io/docs/tasks/manage/setup_multikueue/,
// whose script creates it as a ClusterRole:
// https://github.com/kubernetes-sigs/kueue/blob/main/site/static/examples/multikueue/create-multikueue-kubeconfig.sh
// Workloads differ from the other kinds only in their status: the manager
// also writes it (patch, update). Plain pods have no status rule there.
func multiKueueRules() []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	rules = append(rules, multiKueueRule("batch", "jobs")...)
	rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: createDeleteRead})
	rules = append(rules, multiKueueRule("jobset.x-k8s.io", "jobsets")...)
	rules = append(rules,
		rbacv1.PolicyRule{APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads"}, Verbs: createDeleteRead},
		rbacv1.PolicyRule{APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads/status"}, Verbs: []string{"get", "patch", "update"}},
	)
	rules = append(rules, multiKueueRule("kubeflow.org", "tfjobs", "paddlejobs", "pytorchjobs", "xgboostjobs", "mpijobs")...)
	rules = append(rules, multiKueueRule("ray.io", "rayjobs", "rayclusters")...)
	rules = append(rules, multiKueueRule("workload.codeflare.dev", "appwrappers")...)
	return rules
}

// multiKueueWatchRules are the cluster-wide reads MultiKueue cannot do
// without: Kueue v0.17.0's remote client lists and watches Workloads and
// each enabled integration's kind across all namespaces (remoteClient.
// startWatcher, with a label selector RBAC cannot express) and leaves a
// worker inactive if one watch is refused. Pods are not among them: a
// cluster-wide pod read is every tenant's pod spec, the loop namespace's
// included, so Kueue's pod integration needs the cluster-wide preset.
func multiKueueWatchRules() []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, r := range multiKueueRules() {
		if len(r.Resources) == 1 && r.Resources[0] != "pods" && !strings.Contains(r.Resources[0], "/") {
			rules = append(rules, rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, Verbs: []string{"list", "watch"}})
		}
	}
	return rules
}

// multiKueueGrants is Kueue's documented role in each of namespaces (where
// MultiKueue creates the jobs it dispatches, the job's own namespace on the
// hub), and only the watches above cluster-wide; with no namespaces, the
// role itself cluster-wide, as Kueue documents it.
func multiKueueGrants(namespaces []string) Grants {
	if len(namespaces) == 0 {
		return Grants{Cluster: multiKueueRules()}
	}
	g := Grants{Namespaced: map[string][]rbacv1.PolicyRule{}, Cluster: multiKueueWatchRules()}
	for _, ns := range namespaces {
		g.Namespaced[ns] = multiKueueRules()
	}
	return g
}

// argoCDGrants is Argo CD's namespace-scoped cluster credential, the
// minimal one it documents: `argocd cluster add --namespace NS` creates, in
// each NS only, a Role argocd-manager-role with every verb on every
// resource (ArgoCDManagerNamespacePolicyRules,
// https://github.com/argoproj/argo-cd/blob/master/util/clusterauth/clusterauth.go),
// and the cluster's Secret then lists those namespaces and
// clusterResources: false
// (https://argo-cd.readthedocs.io/en/stable/operator-manual/declarative-setup/#clusters).
// Its default, without --namespace, is a ClusterRole with * on every
// resource and URL: cluster-admin, which is no preset here.
func argoCDGrants(namespaces []string) Grants {
	g := Grants{Namespaced: map[string][]rbacv1.PolicyRule{}}
	for _, ns := range namespaces {
		g.Namespaced[ns] = []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}
	}
	return g
}

// PresetScope is what a preset must respect on the spoke it is for.
type PresetScope struct {
	// LoopNamespace is the spoke's loop_namespace: crucible's work pods,
	// every tenant's code, env and secret files.
	LoopNamespace string
	// AllowClusterWide is the operator's --allow-cluster-wide
	// (allowClusterWide in the spoke chart): a preset may then reach the
	// loop namespace, and multikueue without namespaces is Kueue's
	// documented ClusterRole.
	AllowClusterWide bool
}

// ErrLoopNamespace: a preset would reach the spoke's loop namespace and the
// operator did not say --allow-cluster-wide.
var ErrLoopNamespace = errors.New("covers the loop namespace")

// PresetGrants is the named preset's RBAC in namespaces, which must not
// include the loop namespace unless scope allows it. Argo CD's needs
// namespaces; MultiKueue's needs them too unless scope allows the
// cluster-wide role Kueue documents.
func PresetGrants(name string, namespaces []string, scope PresetScope) (Grants, error) {
	if i := firstDuplicate(namespaces); i >= 0 {
		return Grants{}, fmt.Errorf("preset %s: namespace %q appears twice", name, namespaces[i])
	}
	if !scope.AllowClusterWide && scope.LoopNamespace != "" && slices.Contains(namespaces, scope.LoopNamespace) {
		return Grants{}, fmt.Errorf("preset %s: namespace %q %w (crucible's work pods: other tenants' code, env and secret files); "+
			"name the namespaces the controller works in, or accept that reach with --allow-cluster-wide", name, scope.LoopNamespace, ErrLoopNamespace)
	}
	var g Grants
	switch name {
	case PresetMultiKueue:
		if len(namespaces) == 0 && !scope.AllowClusterWide {
			return Grants{}, fmt.Errorf("preset %s needs the namespaces MultiKueue dispatches to (%s:NS[,NS...]): Kueue's cluster-wide role %w %q "+
				"(create, delete and list of its pods); give --allow-cluster-wide to accept that", name, name, ErrLoopNamespace, scope.LoopNamespace)
		}
		g = multiKueueGrants(namespaces)
	case PresetArgoCD:
		if len(namespaces) == 0 {
			return Grants{}, fmt.Errorf("preset %s needs the namespaces Argo CD may deploy to (%s:NS[,NS...]): its cluster-wide default is cluster-admin", name, name)
		}
		g = argoCDGrants(namespaces)
	default:
		return Grants{}, fmt.Errorf("no preset %q (presets: %s)", name, strings.Join(Presets, ", "))
	}
	if err := g.Validate().ToAggregate(); err != nil {
		return Grants{}, fmt.Errorf("preset %s: %w", name, err)
	}
	return g, nil
}

// firstDuplicate is the index of the first value seen before, or -1.
func firstDuplicate(values []string) int {
	for i := range values {
		if slices.Contains(values[:i], values[i]) {
			return i
		}
	}
	return -1
}
