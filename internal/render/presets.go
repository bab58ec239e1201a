package render

import (
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

// multiKueueGrants is the ClusterRole Kueue documents for the kubeconfig
// user of a MultiKueue worker cluster, rule for rule: "Setup a MultiKueue
// environment", https://kueue.sigs.k8s.io/docs/tasks/manage/setup_multikueue/,
// whose script creates it:
// https://github.com/kubernetes-sigs/kueue/blob/main/site/static/examples/multikueue/create-multikueue-kubeconfig.sh
// It is cluster-wide because MultiKueue creates the job in its own
// namespace on the worker, whichever that is. Workloads differ from the
// other kinds only in their status: the manager also writes it (patch,
// update). Plain pods have no status rule there.
func multiKueueGrants() Grants {
	var cluster []rbacv1.PolicyRule
	cluster = append(cluster, multiKueueRule("batch", "jobs")...)
	cluster = append(cluster, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: createDeleteRead})
	cluster = append(cluster, multiKueueRule("jobset.x-k8s.io", "jobsets")...)
	cluster = append(cluster,
		rbacv1.PolicyRule{APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads"}, Verbs: createDeleteRead},
		rbacv1.PolicyRule{APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads/status"}, Verbs: []string{"get", "patch", "update"}},
	)
	cluster = append(cluster, multiKueueRule("kubeflow.org", "tfjobs", "paddlejobs", "pytorchjobs", "xgboostjobs", "mpijobs")...)
	cluster = append(cluster, multiKueueRule("ray.io", "rayjobs", "rayclusters")...)
	cluster = append(cluster, multiKueueRule("workload.codeflare.dev", "appwrappers")...)
	return Grants{Cluster: cluster}
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

// PresetGrants is the named preset's RBAC. Argo CD's is namespaced and needs
// the namespaces it may deploy to; MultiKueue's is cluster-wide and takes
// none.
func PresetGrants(name string, namespaces []string) (Grants, error) {
	var g Grants
	switch name {
	case PresetMultiKueue:
		if len(namespaces) > 0 {
			return Grants{}, fmt.Errorf("preset %s takes no namespaces (its role is cluster-wide, as Kueue documents it)", name)
		}
		g = multiKueueGrants()
	case PresetArgoCD:
		if len(namespaces) == 0 {
			return Grants{}, fmt.Errorf("preset %s needs the namespaces Argo CD may deploy to (%s:NS[,NS...]): its cluster-wide default is cluster-admin", name, name)
		}
		if i := firstDuplicate(namespaces); i >= 0 {
			return Grants{}, fmt.Errorf("preset %s: namespace %q appears twice", name, namespaces[i])
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
