package apiv1

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
