package apiv1

// Class is a pod class as GET /api/classes shows it: what a pod of it gets
// and what a submitter may change, so that the CLI and the web UI can offer
// exactly the asks the submit will accept.
type Class struct {
	Name       string            `json:"name"`
	DefaultFor []string          `json:"default_for,omitempty"`
	Requests   map[string]string `json:"requests"`
	Limits     map[string]string `json:"limits,omitempty"`
	GPUs       int               `json:"gpus"`
	// GPUResource is the cluster's name for a GPU (its device plugin's).
	GPUResource string `json:"gpu_resource"`
	Deadline    string `json:"deadline"`
	MaxDeadline string `json:"max_deadline"`
	Shm         string `json:"shm,omitempty"`
	Allow       Allow  `json:"allow"`
}

// Allow is what a submitter may change of a class: GPUs within [min, max]
// when max > 0, each named resource within its range, the deadline up to
// the class's max_deadline.
type Allow struct {
	GPUs      *Range           `json:"gpus,omitempty"`
	Resources map[string]Range `json:"resources,omitempty"`
}

// Range is an inclusive bound; an empty Min is no lower bound.
type Range struct {
	Min string `json:"min,omitempty"`
	Max string `json:"max"`
}

// ClusterClasses are the classes a caller may submit with on one cluster.
type ClusterClasses struct {
	Cluster string  `json:"cluster"`
	Classes []Class `json:"classes"`
}
