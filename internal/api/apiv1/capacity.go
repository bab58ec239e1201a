package apiv1

import "time"

// ClusterCapacity is one spoke as GET /api/capacity shows it, in profile
// order, by its capacity view: Total is the nodes' allocatable, Free what
// bound pods leave of it on the nodes that take new pods (ready, not
// cordoned).
type ClusterCapacity struct {
	Cluster string `json:"cluster"`
	// View: the cluster has a capacity view (capacity = true in the
	// profile). Synced: the view has listed the spoke's nodes and pods
	// since the controller started; until then the figures below are
	// absent, not zero.
	View   bool `json:"view"`
	Synced bool `json:"synced"`
	// GPUs are per product (the node label nvidia.com/gpu.product; ""
	// for nodes without it), sorted by product.
	GPUs   []GPUProduct `json:"gpus,omitempty"`
	CPU    *Amount      `json:"cpu,omitempty"`
	Memory *Amount      `json:"memory,omitempty"`
	// Fits answers ?class=C: whether some node takes a pod of the class
	// now, and Reason, when not, why (in kube-scheduler's style, "1 of 4
	// nvidia.com/gpu free (needs 2)", or "class gpu not offered"). Absent
	// without ?class, or without a synced view.
	Fits   *bool  `json:"fits,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// GPUProduct is one GPU product's count on a cluster.
type GPUProduct struct {
	Product string `json:"product"`
	Free    int64  `json:"free"`
	Total   int64  `json:"total"`
}

// Amount is a resource's free and total amounts as Kubernetes quantities
// ("3500m", "60Gi"), as a pod spec writes them.
type Amount struct {
	Free  string `json:"free"`
	Total string `json:"total"`
}

// ClusterHistory is one spoke as GET /api/capacity/history shows it, in
// profile order: its GPUs' occupancy per product over the last hour,
// sampled every 30 s by the controller that answers (each replica keeps
// its own, from its start).
type ClusterHistory struct {
	Cluster string `json:"cluster"`
	// View: the cluster has a capacity view; without one GPUs is absent.
	View bool `json:"view"`
	// GPUs are per product, sorted by product; empty until the view has
	// synced, or on a spoke without GPUs.
	GPUs []GPUSeries `json:"gpus,omitempty"`
}

// GPUSeries is one GPU product's samples on a cluster, oldest first. A
// product whose nodes went away is sampled as 0 of 0 until an hour of
// such samples, then left out.
type GPUSeries struct {
	Product string      `json:"product"`
	Samples []GPUSample `json:"samples"`
}

// GPUSample is a product's GPUs in use (requested by bound pods and
// placements in flight) and in all, on schedulable nodes, at Time (UTC).
type GPUSample struct {
	Time  time.Time `json:"time"`
	Used  int64     `json:"used"`
	Total int64     `json:"total"`
}
