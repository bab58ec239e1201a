package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Callers test them with errors.Is; every error the store
// returns wraps one of them when the cause is one of these conditions.
var (
	// ErrNotFound: the work pod or artifact does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a work pod with that id already exists, or an artifact of
	// that kind was already recorded with different content.
	ErrConflict = errors.New("conflict")
	// ErrKeyTaken: the submitter already has a work pod with that
	// idempotency key (CreateWorkPod wrote nothing; GetWorkPodByKey finds
	// the row).
	ErrKeyTaken = errors.New("idempotency key already used")
	// ErrImmutable: an UpdateWorkPod callback changed ID, Cluster,
	// Submitter, IdempotencyKey, RequestSHA256 or CreatedAt. Those identify
	// the row, the submit that made it and the pod on its spoke, so
	// changing them is a caller bug, reported rather than silently undone.
	// So is changing Node, Progress or Waiting: what the spoke said is
	// ObservePod's to write, with its history.
	ErrImmutable = errors.New("immutable field changed")
	// ErrQuota: recording the artifact would take its pod past a Quota.
	ErrQuota = errors.New("artifact quota exceeded")
	// ErrFull: recording the artifact would take all artifacts together
	// past Quota.MaxTotalBytes. Unlike ErrQuota it is no verdict on the pod:
	// the same claim fits once an operator frees room.
	ErrFull = errors.New("artifact storage full")
	// ErrSchemaTooNew: the database was migrated by a newer binary. Running an
	// older binary against it could misread rows, so Open refuses.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
	// ErrFenced: a fenced write (WithFence) or ClaimEpoch was refused and
	// wrote nothing, because the fence's cluster has a higher epoch
	// claimed (a newer owner: the writer has lost the spoke and must
	// stop), or because the row is another cluster's (a caller bug;
	// retrying cannot help either).
	ErrFenced = errors.New("fenced")
)

// State is where a work pod is in its life.
type State string

// The states of a work pod. Pending, dispatched and running are live: the
// controller still owes the pod an await. The others are terminal.
const (
	StatePending    State = "pending"
	StateDispatched State = "dispatched"
	StateRunning    State = "running"
	StateSucceeded  State = "succeeded"
	StateFailed     State = "failed"
	StateCancelled  State = "cancelled"
	StateLost       State = "lost" // the pod is confirmed gone from its spoke (R-C5)
)

// Terminal reports whether the pod has finished, one way or another.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateCancelled, StateLost:
		return true
	}
	return false
}

// LiveStates are the states for which Live is true, as a Transition's From.
var LiveStates = []State{StatePending, StateDispatched, StateRunning}

// Live reports whether the pod still needs the controller's attention.
func (s State) Live() bool {
	switch s {
	case StatePending, StateDispatched, StateRunning:
		return true
	}
	return false
}

// valid reports whether s is one of the declared states; the store refuses to
// write anything else so that Live and Terminal stay exhaustive.
func (s State) valid() bool { return s.Live() || s.Terminal() }

// WorkPod is one row of work_pods.
type WorkPod struct {
	ID           string // also the pod's name on the spoke (DNS label)
	Cluster      string // the spoke it runs on
	Namespace    string
	Kind         string // "loop" | "turn"
	State        State
	PodUID       string // uid on that cluster once created ("" before)
	Spec         []byte // the submitted request, JSON, opaque to the store; empty reads back as nil
	ExitCode     *int32
	Reason       string // why it failed / was lost
	LogCollected bool   // tier-1 log stored as artifact "log" (R-C7); the sweep deletes only collected pods
	Submitter    string // who asked for it (R-C12); set at create, immutable
	// IdempotencyKey is the client's Idempotency-Key of the submit that
	// made the row ("": none), unique per Submitter; RequestSHA256 is the
	// hex SHA-256 of that request, so a replay can be told from a reuse of
	// the key for another request. Both are set at create, immutable.
	IdempotencyKey string
	RequestSHA256  string
	// Placement is how the controller chose Cluster (nil: the submitter
	// named it). Set at create; only a move (MoveWorkPod) changes it.
	Placement  *Placement
	CreatedAt  time.Time
	UpdatedAt  time.Time // CreatedAt and UpdatedAt are UTC and set by the store
	FinishedAt *time.Time
	// Node, Progress and Waiting are what the pod's spoke said of it,
	// written by ObservePod only: the node it was scheduled on ("" before),
	// the latest start moment recorded (EventScheduled, EventPulled,
	// EventStarted; "" none), and why the live pod waits now (nil: nothing
	// holds it). The store clears Waiting when the row finishes.
	Node     string
	Progress Event
	Waiting  *Waiting
}

// Filter selects work pods. Zero fields do not filter; Limit 0 means all.
// Results are ordered newest first (CreatedAt descending), then by ID.
type Filter struct {
	Cluster string
	Kind    string
	States  []State
	Limit   int
	// After continues a listing: only rows that come after this one in the
	// list order (keyset pagination on the (created_at, id) index, so a page
	// costs the same however deep it is).
	After *Cursor
	// WithoutSpec leaves Spec nil: list views never read the specs, which
	// may be up to a few MiB each.
	WithoutSpec bool
	// CreatedSince keeps the rows created at or after it (zero: all), on
	// the created_at index.
	CreatedSince time.Time
	// Placed keeps the rows the controller placed (Placement set).
	Placed bool
}

// Cursor is a position in the list order: the last row of a page.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// Artifact is one recorded result of a work pod: the bytes live elsewhere
// (the drop-box's files, R-IN6); the store records what was accepted. The
// record is the claim: of several writers of one (PodID, Kind) the first
// recorded wins, and the file served is the one its SHA256 names.
type Artifact struct {
	PodID     string
	Kind      string
	Size      int64
	SHA256    string // hex
	Source    Source
	CreatedAt time.Time // set by the store
}

// Source says who wrote an artifact (R-IN7). A work pod runs user code, so
// what it uploaded is never taken for what the controller collected.
type Source string

const (
	SourceController Source = "controller" // the tier-1 log, controller-owned kinds
	SourcePod        Source = "pod"        // uploaded through the drop-box
)

// Quota bounds the artifacts one pod has of one source, and the size of all
// artifacts together, checked in the same transaction as the insert so
// concurrent writers (also on other replicas) cannot together exceed it.
// Zero fields do not limit.
type Quota struct {
	MaxKinds int   // artifacts (kinds) per pod
	MaxBytes int64 // their total size
	// MaxTotalBytes bounds the sum of every artifact's size, every pod's and
	// every source's ([ingest] max_total_bytes): ErrFull. Exact on both
	// backends — on PostgreSQL claims that check it queue on one row lock,
	// so replicas cannot together overshoot it. A writer that sets none
	// still counts towards it: the controller stores a pod's log without
	// it, since artifacts are never deleted and a log refused once would be
	// refused for good, and the sweep deletes only pods whose log is
	// collected.
	MaxTotalBytes int64
	// MaxSubmitterBytes and MaxClusterBytes bound the sum of the artifacts
	// of every pod of the pod's submitter, and of its cluster ([ingest]
	// max_bytes_per_submitter, max_bytes_per_cluster): a *FullError naming
	// the budget, so one tenant or one spoke cannot fill MaxTotalBytes for
	// all. As exact as MaxTotalBytes: the claim sums them under the same
	// row lock.
	MaxSubmitterBytes, MaxClusterBytes int64
}

// Budget names the bound a *FullError passed.
type Budget string

// The budgets of a Quota that answer ErrFull.
const (
	BudgetTotal     Budget = "total"
	BudgetSubmitter Budget = "submitter"
	BudgetCluster   Budget = "cluster"
)

// FullError is ErrFull for one budget: what it held (Used, for the
// submitter or cluster Of), what the artifact would add, and the bound.
type FullError struct {
	Budget    Budget
	Of        string // the submitter or cluster; "" for the total
	Used, Add int64
	Limit     int64
}

func (e *FullError) Error() string {
	of := ""
	if e.Of != "" {
		of = " of " + string(e.Budget) + " " + e.Of
	}
	return fmt.Sprintf("%v: the %s budget: artifacts%s hold %d bytes, %d more would pass %d", ErrFull, e.Budget, of, e.Used, e.Add, e.Limit)
}

func (e *FullError) Unwrap() error { return ErrFull }

// Store is the controller's state. Implementations are safe for concurrent use.
//
// A write whose ctx carries a Fence (WithFence) is fenced: it claims the
// fence's epoch for its cluster, as ClaimEpoch does, and is refused with
// ErrFenced, writing nothing, when the cluster has a higher epoch claimed
// or its row is another cluster's. No fenced write of an epoch commits
// after a higher epoch's claim did, also across replicas on PostgreSQL.
// CreateWorkPod, UpdateWorkPod, TransitionWorkPod, ObservePod and
// PutArtifact (held to its pod's cluster) are fenced so; reads ignore
// fences. A fenced write that fails for another reason has still claimed
// its epoch.
type Store interface {
	// CreateWorkPod inserts p. ErrConflict if the ID exists; ErrKeyTaken if
	// p.IdempotencyKey is set and p.Submitter already has a row with that
	// key — decided by the insert itself, so of two writers racing one key
	// (also replicas on PostgreSQL) exactly one creates a row. The store
	// sets CreatedAt and UpdatedAt; the row is returned as a GetWorkPod
	// would read it, so a caller never reads back what it just wrote.
	CreateWorkPod(ctx context.Context, p WorkPod) (WorkPod, error)
	// GetWorkPodByKey returns submitter's row made with idempotency key
	// key, or ErrNotFound. Keys are per submitter: another submitter's row
	// with the same key is not found.
	GetWorkPodByKey(ctx context.Context, submitter, key string) (WorkPod, error)
	// GetWorkPod returns the pod or ErrNotFound.
	GetWorkPod(ctx context.Context, id string) (WorkPod, error)
	// GetWorkPods returns the rows of ids that exist, by id, without their
	// specs: a few queries for many rows, where one GetWorkPod per row
	// would cost a round trip each (the sweep reads a listed page's rows).
	GetWorkPods(ctx context.Context, ids []string) (map[string]WorkPod, error)
	// ListWorkPods returns the pods matching f, newest first.
	ListWorkPods(ctx context.Context, f Filter) ([]WorkPod, error)
	// CountLive returns, for every cluster with live pods, how many are in
	// each live state: the fleet's table in one query.
	CountLive(ctx context.Context) (map[string]LiveCounts, error)
	// UpdateWorkPod reads the row, calls fn, and writes the result in one
	// transaction, so concurrent updates (also from other replicas on
	// PostgreSQL) never lose each other's changes. fn returning an error
	// aborts with that error wrapped and the row unchanged. fn must not
	// change ID, Cluster, Submitter, IdempotencyKey, RequestSHA256 or
	// CreatedAt (ErrImmutable) and must not call the
	// Store: on SQLite it runs while holding the only write connection.
	UpdateWorkPod(ctx context.Context, id string, fn func(*WorkPod) error) (WorkPod, error)
	// TransitionWorkPod applies t in one conditional statement (fenced
	// too: the statement holds the epoch) and returns the row as written,
	// with Spec nil (a transition never changes it): ErrConflict (and the
	// row unchanged) when the row's state is not one of t.From,
	// ErrNotFound when there is no row. The store sets UpdatedAt (and
	// FinishedAt when t.Finish). Updates that depend on more than the
	// state use UpdateWorkPod.
	TransitionWorkPod(ctx context.Context, id string, t Transition) (WorkPod, error)
	// PutArtifact records an artifact. The same (PodID, Kind) with the same
	// SHA256 and Source again is (false, nil), with a different SHA256
	// ErrConflict; an unknown PodID is ErrNotFound. created is true when the
	// row is new. A SourceController write replaces a SourcePod row of the
	// same kind (created true): the controller's claim on a kind it owns
	// outranks a pod's. A new row that would take the pod's artifacts of
	// a.Source past q is ErrQuota, and one that would take all artifacts
	// past q.MaxTotalBytes ErrFull (ErrQuota when both); an existing row
	// answers before q is looked at. A refused claim records nothing.
	PutArtifact(ctx context.Context, a Artifact, q Quota) (created bool, err error)
	// ArtifactBytes returns the size of all recorded artifacts together,
	// what Quota.MaxTotalBytes is held against, without summing them (the
	// store keeps the sum). It is a read outside any claim, for checking
	// before bytes are staged: it may have grown by the time the caller
	// claims, which is why PutArtifact checks again.
	ArtifactBytes(ctx context.Context) (int64, error)
	// BudgetBytes returns the size of the artifacts of every pod of podID's
	// submitter (BudgetSubmitter) or cluster (BudgetCluster), and which
	// submitter or cluster that is: what Quota.MaxSubmitterBytes and
	// MaxClusterBytes are held against. It walks their pods' rows, so
	// callers ask only once the total has passed the budget.
	BudgetBytes(ctx context.Context, podID string, b Budget) (of string, used int64, err error)
	// GetArtifact returns the artifact or ErrNotFound.
	GetArtifact(ctx context.Context, podID, kind string) (Artifact, error)
	// ListArtifacts returns the pod's artifacts ordered by Kind (none for an
	// unknown pod).
	ListArtifacts(ctx context.Context, podID string) ([]Artifact, error)
	// ObservePod records what the spoke says of a live row's pod that is
	// no state (Observation.Apply): in one transaction that holds the row,
	// as every state change does. changed is false, and nothing written,
	// when the row had it all already or is terminal; ErrNotFound when
	// there is no row. The row is returned with Spec nil.
	ObservePod(ctx context.Context, id string, o Observation) (p WorkPod, changed bool, err error)
	// MoveWorkPod moves a placed row whose pod never started to another
	// cluster (Move, spill-over): only while the row is pending or
	// dispatched on m.From with pod uid m.PodUID (ErrConflict otherwise,
	// and for a row whose submitter named its cluster); ErrNotFound when
	// there is no row. The row becomes pending on m.To with no pod, and its
	// history records the move, in one transaction. Fenced, it is m.From's
	// owner's write. The row is returned with its new Spec.
	MoveWorkPod(ctx context.Context, id string, m Move) (WorkPod, error)
	// KeepMirrorDocument keeps the discovery mirror's document name
	// ("discovery" or "jwks") as the hub API sent it at fetchedAt, unless a
	// newer fetch is kept already; MirrorDocument reads it back
	// (ErrNotFound: none kept). Every replica's mirror serves them when
	// it starts while the hub API is unreachable.
	KeepMirrorDocument(ctx context.Context, name string, body []byte, fetchedAt time.Time) error
	MirrorDocument(ctx context.Context, name string) (body []byte, fetchedAt time.Time, err error)
	// PodHistory returns the pod's history, oldest first (none for an
	// unknown pod). State changes are recorded by the store itself, in the
	// statement that makes them, whoever makes them.
	PodHistory(ctx context.Context, id string) ([]HistoryEntry, error)
	// ClaimEpoch records epoch as cluster's, for a new owner of the
	// cluster's loops to fence the old one off before it writes anything:
	// ErrFenced when a higher epoch is claimed already; the same epoch
	// again is no error. Epochs only grow, per cluster; they are never
	// released.
	ClaimEpoch(ctx context.Context, cluster string, epoch int64) error
	// DigestKey returns the installation's HMAC key (DigestKeyBytes) for
	// digests the rows keep of values they must not hold. The first call
	// of any replica makes it from crypto/rand; every call after, on any
	// replica and after any reopen, returns the same key.
	DigestKey(ctx context.Context) ([]byte, error)
	Close() error
}

// validate checks what the schema cannot express portably. It does not judge
// names (the API and the drop-box do, R-IN6): the store keeps any string.
func (p *WorkPod) validate() error {
	switch {
	case p.ID == "":
		return errors.New("empty id")
	case p.Cluster == "":
		return errors.New("empty cluster")
	case !p.State.valid():
		return fmt.Errorf("unknown state %q", p.State)
	}
	return nil
}
