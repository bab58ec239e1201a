package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// MaxGrantsBytes bounds an RBAC file: a few hundred rules at most, so a
// larger file is a wrong path, not a policy.
const MaxGrantsBytes = 1 << 20

// Grants is what a federated subject may do on a spoke: rules per namespace
// (a Role in each) and cluster-wide rules (one ClusterRole). Its file form,
// YAML or JSON, is
//
//	namespaced:
//	  <namespace>: [<rule>, ...]
//	cluster: [<rule>, ...]
//
// where a rule is an rbacv1.PolicyRule (apiGroups, resources,
// resourceNames, verbs, nonResourceURLs; nonResourceURLs in cluster rules
// only, as Kubernetes allows).
type Grants struct {
	Namespaced map[string][]rbacv1.PolicyRule `json:"namespaced,omitempty"`
	Cluster    []rbacv1.PolicyRule            `json:"cluster,omitempty"`
}

// ParseGrants decodes an RBAC file strictly: a key that is not part of the
// format, a duplicate key, a value of the wrong type, or a rule Kubernetes
// would refuse is reported with its path (namespaced[loops][0].verbs), every
// problem at once. A file that grants nothing is refused too: it is a
// mistake, not a policy.
func ParseGrants(data []byte) (Grants, error) {
	if len(data) > MaxGrantsBytes {
		return Grants{}, fmt.Errorf("larger than %d bytes", MaxGrantsBytes)
	}
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Grants{}, fmt.Errorf("not YAML or JSON: %w", err)
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return Grants{}, fmt.Errorf("not YAML or JSON: %w", err)
	}
	g, errs := decodeGrants(tree)
	if len(errs) == 0 {
		errs = g.Validate()
	}
	return g, errs.ToAggregate()
}

// decodeGrants walks the decoded tree by hand rather than through
// encoding/json, so an unknown key or a wrong type is named by its path.
func decodeGrants(tree any) (Grants, field.ErrorList) {
	top, ok := tree.(map[string]any)
	if !ok {
		return Grants{}, field.ErrorList{field.Invalid(topPath, typeName(tree), "want an object with namespaced and/or cluster")}
	}
	var g Grants
	var errs field.ErrorList
	for _, key := range sortedKeys(top) {
		p := field.NewPath(key)
		switch key {
		case "cluster":
			var e field.ErrorList
			g.Cluster, e = decodeRules(top[key], p)
			errs = append(errs, e...)
		case "namespaced":
			byNS, isMap := top[key].(map[string]any)
			if !isMap {
				errs = append(errs, field.Invalid(p, typeName(top[key]), "want an object of namespace: [rules]"))
				continue
			}
			g.Namespaced = make(map[string][]rbacv1.PolicyRule, len(byNS))
			for _, ns := range sortedKeys(byNS) {
				rules, e := decodeRules(byNS[ns], p.Key(ns))
				g.Namespaced[ns] = rules
				errs = append(errs, e...)
			}
		default:
			errs = append(errs, field.Forbidden(p, "unknown key: want namespaced or cluster"))
		}
	}
	return g, errs
}

// topPath stands for the whole file in errors about it.
var topPath = field.NewPath("<top>")

// ruleKeys are a PolicyRule's fields as its JSON names them.
var ruleKeys = []string{"apiGroups", "nonResourceURLs", "resourceNames", "resources", "verbs"}

func decodeRules(v any, p *field.Path) ([]rbacv1.PolicyRule, field.ErrorList) {
	list, ok := v.([]any)
	if !ok {
		return nil, field.ErrorList{field.Invalid(p, typeName(v), "want a list of rules")}
	}
	rules := make([]rbacv1.PolicyRule, 0, len(list))
	var errs field.ErrorList
	for i, item := range list {
		obj, isMap := item.(map[string]any)
		if !isMap {
			errs = append(errs, field.Invalid(p.Index(i), typeName(item), "want a rule object"))
			continue
		}
		var r rbacv1.PolicyRule
		fields := map[string]*[]string{
			"apiGroups": &r.APIGroups, "nonResourceURLs": &r.NonResourceURLs, "resourceNames": &r.ResourceNames,
			"resources": &r.Resources, "verbs": &r.Verbs,
		}
		for _, key := range sortedKeys(obj) {
			dst, known := fields[key]
			if !known {
				errs = append(errs, field.Forbidden(p.Index(i).Child(key), "unknown key: want one of "+strings.Join(ruleKeys, ", ")))
				continue
			}
			var e field.ErrorList
			*dst, e = decodeStrings(obj[key], p.Index(i).Child(key))
			errs = append(errs, e...)
		}
		rules = append(rules, r)
	}
	return rules, errs
}

func decodeStrings(v any, p *field.Path) ([]string, field.ErrorList) {
	list, ok := v.([]any)
	if !ok {
		return nil, field.ErrorList{field.Invalid(p, typeName(v), "want a list of strings")}
	}
	out := make([]string, 0, len(list))
	var errs field.ErrorList
	for i, item := range list {
		s, isString := item.(string)
		if !isString {
			errs = append(errs, field.Invalid(p.Index(i), typeName(item), "want a string"))
			continue
		}
		out = append(out, s)
	}
	return out, errs
}

// typeName says what a decoded JSON value is, for errors: never the value
// itself, which may be long.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "list"
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Validate refuses what the API server would refuse on the Role or
// ClusterRole, so that a bad rule fails at render time, not half-applied:
// namespaces that are not DNS labels, rules without verbs, resource rules
// without API groups, nonResourceURLs in a namespace or mixed with
// resources, empty strings; and grants that grant nothing.
func (g Grants) Validate() field.ErrorList {
	var errs field.ErrorList
	n := len(g.Cluster)
	for _, ns := range sortedKeys(g.Namespaced) {
		p := field.NewPath("namespaced").Key(ns)
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(p, ns, "namespace: "+msg))
		}
		if len(g.Namespaced[ns]) == 0 {
			errs = append(errs, field.Required(p, "at least one rule"))
		}
		for i, r := range g.Namespaced[ns] {
			errs = append(errs, validateRule(r, p.Index(i), false)...)
		}
		n += len(g.Namespaced[ns])
	}
	for i, r := range g.Cluster {
		errs = append(errs, validateRule(r, field.NewPath("cluster").Index(i), true)...)
	}
	if n == 0 && len(errs) == 0 {
		errs = append(errs, field.Required(topPath, "grants nothing: give namespaced and/or cluster rules"))
	}
	return errs
}

func validateRule(r rbacv1.PolicyRule, p *field.Path, cluster bool) field.ErrorList {
	var errs field.ErrorList
	for key, list := range map[string][]string{
		"apiGroups": r.APIGroups, "nonResourceURLs": r.NonResourceURLs, "resourceNames": r.ResourceNames,
		"resources": r.Resources, "verbs": r.Verbs,
	} {
		for i, s := range list {
			if key != "apiGroups" && strings.TrimSpace(s) == "" { // "" is the core group
				errs = append(errs, field.Invalid(p.Child(key).Index(i), s, "must not be empty"))
			}
		}
	}
	if len(r.Verbs) == 0 {
		errs = append(errs, field.Required(p.Child("verbs"), "at least one verb"))
	}
	switch {
	case len(r.NonResourceURLs) > 0 && !cluster:
		errs = append(errs, field.Forbidden(p.Child("nonResourceURLs"), "only in cluster rules: a Role cannot grant URLs"))
	case len(r.NonResourceURLs) > 0:
		if len(r.APIGroups)+len(r.Resources)+len(r.ResourceNames) > 0 {
			errs = append(errs, field.Forbidden(p, "a rule grants nonResourceURLs or resources, not both"))
		}
		for i, u := range r.NonResourceURLs {
			if u != "*" && !strings.HasPrefix(u, "/") {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs").Index(i), u, `want a path starting with "/", or "*"`))
			}
		}
	case len(r.Resources) == 0:
		errs = append(errs, field.Required(p.Child("resources"), "at least one resource"+map[bool]string{true: " (or nonResourceURLs)"}[cluster]))
	case len(r.APIGroups) == 0:
		errs = append(errs, field.Required(p.Child("apiGroups"), `at least one API group ("" is the core group)`))
	}
	slices.SortFunc(errs, func(a, b *field.Error) int { return strings.Compare(a.Field, b.Field) })
	return errs
}
