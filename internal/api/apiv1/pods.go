package apiv1

import (
	"time"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/store"
	"crucible.dev/crucible/internal/workpod"
)

// SubmitRequest is the body of POST /api/pods.
type SubmitRequest struct {
	Kind string `json:"kind,omitempty"` // loop | turn (default turn)
	// Cluster is where the pod goes: a cluster's name (pinned), ClusterAuto,
	// or "" for the profile's default. Clusters is a preference list instead
	// of it; Placement is "" or PlacementStrict. CheckPlacement checks the
	// three.
	Cluster     string            `json:"cluster,omitempty"`
	Clusters    []string          `json:"clusters,omitempty"`
	Placement   string            `json:"placement,omitempty"`
	Image       string            `json:"image"`
	Command     []string          `json:"command,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Env         []workpod.EnvVar  `json:"env,omitempty"`
	Files       map[string]string `json:"files,omitempty"`
	SecretFiles map[string]string `json:"secret_files,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Class is the pod class (default: the kind's default class); GPUs,
	// Resources and Deadline change it within its allow bounds.
	Class     string            `json:"class,omitempty"`
	GPUs      *int              `json:"gpus,omitempty"`
	Resources map[string]string `json:"resources,omitempty"` // requests by name, e.g. "memory": "32Gi"
	Deadline  string            `json:"deadline,omitempty"`  // a Go duration, e.g. "6h"
}

// WorkPod is a work pod as the API shows it.
type WorkPod struct {
	ID        string      `json:"id"`
	Cluster   string      `json:"cluster"`
	Namespace string      `json:"namespace"`
	Kind      string      `json:"kind"`
	State     store.State `json:"state"`
	Image     string      `json:"image,omitempty"`
	Command   []string    `json:"command,omitempty"`
	Args      []string    `json:"args,omitempty"`
	// EnvNames, FileNames and SecretFileNames are names only: values may
	// be secret and are never shown.
	EnvNames        []string   `json:"env_names,omitempty"`
	FileNames       []string   `json:"file_names,omitempty"`
	SecretFileNames []string   `json:"secret_file_names,omitempty"`
	PodUID          string     `json:"pod_uid,omitempty"`
	ExitCode        *int32     `json:"exit_code,omitempty"`
	Reason          string     `json:"reason,omitempty"`
	LogCollected    bool       `json:"log_collected"`
	Submitter       string     `json:"submitter,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
	FinishedAt      *time.Time `json:"finished_at,omitempty"`
	// Node is the node the pod was scheduled on; Waiting is why the live
	// pod does not run, as its spoke says, while that holds.
	Node    string   `json:"node,omitempty"`
	Waiting *Waiting `json:"waiting,omitempty"`
	// History is the pod's life, oldest first: GET /api/pods/{pod} only
	// (list views and the event stream leave it out).
	History []HistoryEntry `json:"history,omitzero"`
	// Placement is how the controller chose Cluster; absent for a pod
	// pinned to its cluster.
	Placement *Placement `json:"placement,omitempty"`
}

// Waiting is why a live pod does not run: the scheduler's reason and
// message (e.g. Unschedulable, "0/2 nodes are available: …") or a
// container's waiting state (ImagePullBackOff, …), since when it holds.
type Waiting struct {
	Reason  string    `json:"reason"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since"`
}

// HistoryEntry is one moment of a pod's life: a state change ("state"),
// a wait ("waiting"), or a start moment ("scheduled" with the node as
// message, "pulled", "started"). State is the row's state then.
type HistoryEntry struct {
	At      time.Time   `json:"at"`
	Event   store.Event `json:"event"`
	State   store.State `json:"state"`
	Reason  string      `json:"reason,omitempty"`
	Message string      `json:"message,omitempty"`
}

// What names the entry as the CLI's table and the UI's timeline do: a state
// change by its state, anything else by its event.
func (e HistoryEntry) What() string {
	if e.Event == store.EventState {
		return string(e.State)
	}
	return string(e.Event)
}

// Cluster is a cluster as GET /api/clusters shows it.
type Cluster struct {
	Name          string `json:"name"`
	Server        string `json:"server"`
	LoopNamespace string `json:"loop_namespace"`
	Default       bool   `json:"default"`
	// Draining: the cluster was removed from the profile; nothing new is
	// dispatched to it, and its live pods are followed until they end.
	Draining bool `json:"draining,omitempty"`
	// Owner is the replica (its Lease identity) running the cluster's
	// loops, with leader election; "" while nobody does (or without one).
	Owner  string       `json:"owner,omitempty"`
	Health fleet.Health `json:"health"`
	// Live is how many of the cluster's work pods are pending, dispatched
	// and running; absent when the store could not count them.
	Live *LiveCounts `json:"live,omitempty"`
}

// LiveCounts is a cluster's live work pods by state.
type LiveCounts struct {
	Pending    int64 `json:"pending"`
	Dispatched int64 `json:"dispatched"`
	Running    int64 `json:"running"`
}
