package apiv1

import (
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"crucible.dev/crucible/internal/profile"
)

const (
	// ClusterAuto as SubmitRequest.Cluster lets the controller choose the
	// spoke: where the class is offered and the pod fits now. It is the
	// profile's word for it too (default_cluster = "auto"), so no cluster
	// may be named so.
	ClusterAuto = profile.AutoCluster
	// PlacementStrict as SubmitRequest.Placement refuses a pod that fits
	// nowhere now (409, with every spoke's reason) instead of sending it
	// where it would wait.
	PlacementStrict = "strict"
	// MaxClusters bounds a preference list: a fleet's worth, not a payload.
	MaxClusters = 100
)

// CheckPlacement says what is wrong with req's cluster, clusters and
// placement, every problem with its field. What it cannot know is left to
// the server: whether a named cluster exists (400), and whether an omitted
// cluster with placement strict means a pinned default (the profile's
// default_cluster).
func CheckPlacement(req SubmitRequest) field.ErrorList {
	var errs field.ErrorList
	if req.Cluster != "" && len(req.Clusters) > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("clusters"),
			"cluster and clusters are exclusive: name one cluster, \"auto\", or a preference list"))
	}
	errs = append(errs, checkClusters(req.Clusters)...)
	switch {
	case req.Placement != "" && req.Placement != PlacementStrict:
		errs = append(errs, field.NotSupported(field.NewPath("placement"), req.Placement, []string{PlacementStrict}))
	case req.Placement == PlacementStrict && req.Cluster != "" && req.Cluster != ClusterAuto:
		errs = append(errs, field.Invalid(field.NewPath("placement"), req.Placement,
			"strict means nothing for a pod pinned to cluster "+req.Cluster+": use cluster \"auto\" or clusters"))
	}
	return errs
}

// checkClusters checks a preference list: at most MaxClusters entries, each
// a DNS label (as a profile's cluster names are), none "auto", none twice.
// A list over the bound is reported alone: its entries are not read.
func checkClusters(clusters []string) field.ErrorList {
	path := field.NewPath("clusters")
	if len(clusters) > MaxClusters {
		return field.ErrorList{field.TooMany(path, len(clusters), MaxClusters)}
	}
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, name := range clusters {
		p := path.Index(i)
		switch {
		case name == "":
			errs = append(errs, field.Required(p, "a cluster's name"))
		case name == ClusterAuto:
			errs = append(errs, field.Invalid(p, name, "\"auto\" is not a cluster: set cluster \"auto\" instead of a list"))
		case len(validation.IsDNS1123Label(name)) > 0:
			errs = append(errs, field.Invalid(p, name, "must be a cluster's name (a DNS label)"))
		case seen.Has(name):
			errs = append(errs, field.Duplicate(p, name))
		}
		seen.Insert(name)
	}
	return errs
}

// Placement is how the controller chose a pod's cluster, kept with its row.
type Placement struct {
	// Decision is every spoke's reason on one line, in kube-scheduler's
	// style: "wharf: 1 of 4 nvidia.com/gpu free (needs 2); dock: class gpu
	// not offered; pier: unreachable".
	Decision string `json:"decision"`
	Chosen   string `json:"chosen"`
	// Waits: nothing fit when it was placed; Chosen is where the most
	// capacity for it is, and it waits there.
	Waits bool `json:"waits,omitempty"`
	// Moves are the pod's spill-overs, oldest first.
	Moves []Move `json:"moves,omitempty"`
}

// Move is one spill-over: the pod, which never started on From, was deleted
// there and placed again on To.
type Move struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason"` // e.g. "Unschedulable past spill_after (5m)", "exceeded quota"
	At     time.Time `json:"at"`
}
