package workpod

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// OwnPrefix starts the label and annotation keys crucible sets itself (its
// origin labels). A submitter may never set one, whatever the profile
// admits: reconcile and sweep find crucible's pods by them.
const OwnPrefix = "crucible.dev/"

// CheckMetadataKeys reports every annotation key of w that no prefix of
// prefixes (the profile's [pods] metadata_prefixes, each a DNS subdomain
// ending in "/") starts. It is a policy on top of Check, which decides
// whether a key is well-formed; this decides whether the submitter may set
// it, so that a work pod cannot carry keys the spoke's admission or tooling
// acts on (kubernetes.io/, a mesh's sidecar injection). Keys are compared
// case-insensitively, as the API server validates them, so "Crucible.DEV/x"
// is crucible's too. The submit API takes no labels, so annotations are all
// there is to check.
func CheckMetadataKeys(w WorkPod, prefixes []string) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("annotations")
	for _, k := range slices.Sorted(maps.Keys(w.Annotations)) {
		if msg := refuseKey(k, prefixes); msg != "" {
			errs = append(errs, field.Forbidden(p.Key(k), msg))
		}
	}
	return errs
}

// refuseKey says why a submitter may not set key, or "" if it may.
func refuseKey(key string, prefixes []string) string {
	lower := strings.ToLower(key)
	if strings.HasPrefix(lower, OwnPrefix) {
		return "keys under " + OwnPrefix + " are crucible's own"
	}
	for _, prefix := range prefixes {
		// A prefix ends in "/", so "example.com/" never admits
		// "example.com.evil/x" nor "sub.example.com/x".
		if strings.HasSuffix(prefix, "/") && strings.HasPrefix(lower, strings.ToLower(prefix)) {
			return ""
		}
	}
	if len(prefixes) == 0 {
		return "[pods] metadata_prefixes admits no key; add this key's prefix to it"
	}
	return "not under [pods] metadata_prefixes (" + strings.Join(prefixes, ", ") + "); add this key's prefix to it"
}
