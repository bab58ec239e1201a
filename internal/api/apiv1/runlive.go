package apiv1

// RunLive is GET /api/pods/{pod}/run-live: whether the caller can
// port-forward to the pod now, and how. The web UI's pod page and `crucible
// run-live` read it; the port-forward endpoint decides on its own.
type RunLive struct {
	// Enabled: the pod's cluster lets callers port-forward to its pods
	// (clusters[].run_live).
	Enabled bool `json:"enabled"`
	// Port is the cluster's run_live_port, Ports every port that may be
	// forwarded (run_live_ports); both only when Enabled.
	Port  int   `json:"port,omitempty"`
	Ports []int `json:"ports,omitempty"`
	// Allowed: the caller may (create on workpods/portforward, and
	// create-any as well for a pod another submitter made).
	Allowed bool `json:"allowed"`
	// Running: the pod runs, so there is something to forward to.
	Running bool `json:"running"`
	// Available is all three.
	Available bool `json:"available"`
	// Command is the CLI's command for it (when Enabled).
	Command string `json:"command,omitempty"`
	// Reason says why it is not available, naming what to change.
	Reason string `json:"reason,omitempty"`
}
