package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"crucible.dev/crucible/internal/artifact"
	"crucible.dev/crucible/internal/httperr"
	"crucible.dev/crucible/internal/store"
)

const (
	// retryAfterBusy answers a pod that already has MaxStagingPerPod
	// uploads in flight; retryAfterStorage a volume below its floor, which
	// an operator (or a sweep) has to free.
	retryAfterBusy    = "1"
	retryAfterStorage = "60"
)

// Blobs is where the drop-box keeps artifact bytes: artifact.Dir or
// pgblob.Blobs. Content is staged, committed under its digest, then claimed
// in the store; a lost claim's bytes are removed by the one who staged them.
type Blobs interface {
	Stage(ctx context.Context, podID, kind string, r io.Reader, limit int64) (artifact.Staged, error)
	Remove(ctx context.Context, podID, kind, digest string) error
}

// freeSpacer is a Blobs on a volume of its own (the directory), which the
// free-space floor protects.
type freeSpacer interface{ FreeBytes() (uint64, error) }

func conflict() *httperr.Error {
	return refuse(http.StatusConflict, "conflict", "a different artifact of this kind is already stored")
}

func tooLarge() *httperr.Error {
	return refuse(http.StatusRequestEntityTooLarge, "too_large", "artifact too large")
}

// refuseReserved answers 403 for a kind the controller owns ("log",
// "crucible-*"). It names the kind: whether a kind is reserved is no secret,
// so it runs before authentication and tells an honest pod what is wrong.
func refuseReserved(kind string) error {
	if !artifact.Reserved(kind) {
		return nil
	}
	return refuse(http.StatusForbidden, "reserved",
		fmt.Sprintf("kind %q is reserved for the controller (%s and %s* are not uploadable)", kind, artifact.LogKind, artifact.ReservedPrefix))
}

// refuseClosed answers 403 for a row that takes no more uploads: cancelled,
// lost, or its log collected (after which the sweep deletes the pod). The
// body is every 403's, since an outsider reaches this check before the
// TokenReview; the reason goes to the Debug log.
func (h *Handler) refuseClosed(row store.WorkPod) error {
	var reason string
	switch {
	case row.State == store.StateCancelled:
		reason = "cancelled"
	case row.State == store.StateLost:
		reason = "lost"
	case row.LogCollected:
		reason = "log collected"
	default:
		return nil
	}
	h.log.Debug("upload for a closed work pod refused", "pod", row.ID, "reason", reason)
	return deny(http.StatusForbidden, fmt.Errorf("work pod is %s", reason))
}

// save stores the body as artifact kind of row. Under the (pod, kind) lock
// of this replica: a recorded artifact answers 200/409 without staging;
// otherwise the quotas and the free-space floor are checked before
// anything is written and bound the staging reader, the body is staged,
// committed under its digest and claimed in the store: 201, or 409/413/507
// for a claim lost to another writer, the pod's quota or the total of all
// artifacts, whose file is removed.
func (h *Handler) save(rc *http.ResponseController, r *http.Request, row store.WorkPod, kind string) (stored, error) {
	if err := h.refuseClosed(row); err != nil { // authorize checked too; this holds whatever the order above
		return stored{}, err
	}
	if r.ContentLength > h.opts.MaxBodyBytes {
		return stored{}, tooLarge()
	}
	unlock := h.locks.lock(row.ID + "/" + kind)
	defer unlock()
	ctx := r.Context()
	body := h.pace(rc, r.Body)
	defer body.stop()

	prev, err := h.opts.Store.GetArtifact(ctx, row.ID, kind)
	switch {
	case err == nil:
		return h.compare(r, body, prev)
	case !errors.Is(err, store.ErrNotFound):
		return stored{}, unavailable(err)
	}
	space, err := h.room(ctx, row.ID, r.ContentLength)
	if err != nil {
		return stored{}, err
	}
	release, ok := h.staging.acquire(row.ID, h.opts.MaxStagingPerPod)
	if !ok {
		return stored{}, refuse(http.StatusTooManyRequests, "busy", "too many uploads of this pod at once, retry later").With("Retry-After", retryAfterBusy)
	}
	defer release()

	staged, err := h.opts.Artifacts.Stage(ctx, row.ID, kind, body, space.limit)
	switch {
	case errors.Is(err, artifact.ErrTooLarge):
		return stored{}, space.refusal()
	case err != nil && body.err != nil:
		return stored{}, body.refusal(err)
	case err != nil:
		return stored{}, unavailable(err)
	}
	defer staged.Discard()
	wr := staged.Written()
	if err := staged.Commit(ctx); err != nil {
		return stored{}, unavailable(err)
	}
	return h.claim(ctx, row, kind, wr)
}

// claim records the committed file wr as the pod's artifact kind.
func (h *Handler) claim(ctx context.Context, row store.WorkPod, kind string, wr artifact.Written) (stored, error) {
	a := store.Artifact{PodID: row.ID, Kind: kind, Size: wr.Size, SHA256: wr.SHA256, Source: store.SourcePod}
	q := store.Quota{
		MaxKinds: h.opts.MaxKindsPerPod, MaxBytes: h.opts.MaxBytesPerPod, MaxTotalBytes: h.opts.MaxTotalBytes,
		MaxSubmitterBytes: h.opts.MaxBytesPerSubmitter, MaxClusterBytes: h.opts.MaxBytesPerCluster,
	}
	created, err := h.opts.Store.PutArtifact(ctx, a, q)
	done := uploaded{Pod: row.ID, Kind: kind, Size: wr.Size, SHA256: wr.SHA256}
	switch {
	case errors.Is(err, store.ErrConflict):
		h.removeUnclaimed(ctx, row.ID, kind, wr.SHA256) // another replica recorded other bytes meanwhile
		return stored{}, conflict()
	case errors.Is(err, store.ErrQuota):
		h.removeUnclaimed(ctx, row.ID, kind, wr.SHA256) // another replica took the room meanwhile
		return stored{}, quotaExceeded(err)
	case errors.Is(err, store.ErrFull):
		h.removeUnclaimed(ctx, row.ID, kind, wr.SHA256) // other pods took the room meanwhile
		return stored{}, full(err)
	case err != nil:
		// The claim may have landed before the error: keep the file, which
		// at worst nobody names.
		return stored{}, unavailable(err)
	case !created:
		return stored{art: done}, nil
	}
	h.log.Info("artifact stored", "pod", row.ID, "kind", kind, "size", wr.Size, "sha256", wr.SHA256)
	return stored{art: done, created: true}, nil
}

// removeUnclaimed deletes the file of a lost claim. Only called after
// ErrConflict (the kind is recorded with other bytes, for good), ErrQuota
// (nothing was recorded and the pod's usage only grows, so no later claim
// of these bytes can succeed) or ErrFull (nothing was recorded, and the
// total only grows too: crucible deletes no artifact). The file can never
// be the recorded one — but for an operator who deletes rows while the
// same pod uploads the same bytes of the same kind through another
// replica, whose claim may then land on the file removed here.
func (h *Handler) removeUnclaimed(ctx context.Context, podID, kind, digest string) {
	if err := h.opts.Artifacts.Remove(context.WithoutCancel(ctx), podID, kind, digest); err != nil {
		h.log.Warn("removing an unrecorded artifact file failed", "pod", podID, "kind", kind, "error", err)
	}
}

// compare answers an upload of a recorded kind without staging it: a
// Content-Length other than the recorded size is 409 at once; otherwise the
// body is hashed as it streams past and compared, 200 or 409.
func (h *Handler) compare(r *http.Request, body *pacedBody, prev store.Artifact) (stored, error) {
	if r.ContentLength >= 0 && r.ContentLength != prev.Size {
		return stored{}, conflict()
	}
	got, err := artifact.Digest(body, prev.Size)
	switch {
	case errors.Is(err, artifact.ErrTooLarge):
		return stored{}, conflict()
	case err != nil:
		return stored{}, body.refusal(err)
	case got.SHA256 != prev.SHA256:
		return stored{}, conflict()
	}
	return stored{art: uploaded{Pod: prev.PodID, Kind: prev.Kind, Size: prev.Size, SHA256: prev.SHA256}}, nil
}

// bound names the limit that caps a staging reader.
type bound int

const (
	boundBody      bound = iota // MaxBodyBytes
	boundQuota                  // the pod's MaxBytesPerPod
	boundTotal                  // MaxTotalBytes, all artifacts together
	boundSubmitter              // MaxBytesPerSubmitter
	boundCluster                // MaxBytesPerCluster
	boundSpace                  // the volume's MinFreeBytes floor
)

// room is how much one upload may stage, and which limit says so.
type room struct {
	limit int64
	by    bound
}

// refusal is the answer for a body that passed the limit while staging.
func (rm room) refusal() *httperr.Error {
	switch rm.by {
	case boundQuota:
		return quotaExceeded(errors.New("body passed the pod's byte quota"))
	case boundTotal:
		return full(&store.FullError{Budget: store.BudgetTotal, Add: rm.limit + 1})
	case boundSubmitter:
		return full(&store.FullError{Budget: store.BudgetSubmitter, Add: rm.limit + 1})
	case boundCluster:
		return full(&store.FullError{Budget: store.BudgetCluster, Add: rm.limit + 1})
	case boundSpace:
		return insufficientStorage()
	}
	return tooLarge()
}

func quotaExceeded(err error) *httperr.Error {
	he := refuse(http.StatusRequestEntityTooLarge, "quota", "quota exceeded: this pod may store no more artifacts of this size (limits on kinds and total bytes per pod)")
	he.Err = err
	return he
}

func insufficientStorage() *httperr.Error {
	return refuse(http.StatusInsufficientStorage, "insufficient_storage", "insufficient storage for artifacts, retry later").With("Retry-After", retryAfterStorage)
}

// budgetsLeft is the least room the pod's submitter's and cluster's
// budgets leave (limit 1<<62 when neither binds), or their 507 when the
// upload cannot fit. A share of the total cannot pass a budget the total
// itself fits, so the pods' rows are summed only when the total and the
// most this upload can bring (its Content-Length, else max_body_bytes)
// would pass it; the claim checks again, exactly.
func (h *Handler) budgetsLeft(ctx context.Context, podID string, total, contentLength int64) (room, error) {
	most := contentLength
	if most < 0 {
		most = h.opts.MaxBodyBytes
	}
	rm := room{limit: 1 << 62}
	for _, b := range []struct {
		budget store.Budget
		limit  int64
		by     bound
	}{{store.BudgetSubmitter, h.opts.MaxBytesPerSubmitter, boundSubmitter}, {store.BudgetCluster, h.opts.MaxBytesPerCluster, boundCluster}} {
		if total+most <= b.limit {
			continue
		}
		of, used, err := h.opts.Store.BudgetBytes(ctx, podID, b.budget)
		if err != nil {
			return room{}, unavailable(err)
		}
		left := b.limit - used
		if left < 0 || contentLength > left {
			return room{}, full(&store.FullError{Budget: b.budget, Of: of, Used: used, Add: max(contentLength, 0), Limit: b.limit})
		}
		if left < rm.limit {
			rm = room{limit: left, by: b.by}
		}
	}
	return rm, nil
}

// budgetKeys are the [ingest] keys of the store's budgets, as a 507 names
// them.
var budgetKeys = map[store.Budget]string{
	store.BudgetTotal:     "max_total_bytes",
	store.BudgetSubmitter: "max_bytes_per_submitter",
	store.BudgetCluster:   "max_bytes_per_cluster",
}

// full is insufficientStorage for a budget of the store: the total of all
// artifacts, or those of the pod's submitter or cluster. The answer names
// the budget's key (whose it is and how full only the log says), so the
// pod's owner knows whether an operator must raise it or their own
// artifacts fill it.
func full(err error) *httperr.Error {
	he := insufficientStorage()
	key := budgetKeys[store.BudgetTotal]
	if fe := (*store.FullError)(nil); errors.As(err, &fe) {
		key = budgetKeys[fe.Budget]
	}
	he.Msg = "insufficient storage for artifacts: the " + key + " budget is full, retry later"
	he.Err = err
	return he
}

// room checks the pod's quotas, the total of all artifacts and the volume's
// floor before anything is staged (with the Content-Length when the client
// sent one) and returns how much may be staged. The store's claim checks
// the quotas and the total again, atomically.
func (h *Handler) room(ctx context.Context, podID string, contentLength int64) (room, error) {
	arts, err := h.opts.Store.ListArtifacts(ctx, podID)
	if err != nil {
		return room{}, unavailable(err)
	}
	var kinds int
	var used int64
	for _, a := range arts {
		if a.Source == store.SourcePod {
			kinds++
			used += a.Size
		}
	}
	left := h.opts.MaxBytesPerPod - used
	switch {
	case kinds >= h.opts.MaxKindsPerPod:
		return room{}, quotaExceeded(fmt.Errorf("pod has %d kinds, at most %d", kinds, h.opts.MaxKindsPerPod))
	case contentLength > left:
		return room{}, quotaExceeded(fmt.Errorf("pod has %d bytes, %d more would pass %d", used, contentLength, h.opts.MaxBytesPerPod))
	}
	total, err := h.opts.Store.ArtifactBytes(ctx)
	if err != nil {
		return room{}, unavailable(err)
	}
	// Logs count but are stored unbounded, so the total may be past the
	// bound already: then even an empty body would be refused by the claim.
	totalLeft := h.opts.MaxTotalBytes - total
	switch {
	case totalLeft < 0:
		return room{}, full(fmt.Errorf("artifacts hold %d bytes, past max_total_bytes %d", total, h.opts.MaxTotalBytes))
	case contentLength > totalLeft:
		return room{}, full(fmt.Errorf("artifacts hold %d bytes, %d more would pass max_total_bytes %d", total, contentLength, h.opts.MaxTotalBytes))
	}
	budgetLeft, err := h.budgetsLeft(ctx, podID, total, contentLength)
	if err != nil {
		return room{}, err
	}
	spare := int64(1 << 62) // no floor: the bytes are in the database
	if h.opts.freeBytes != nil {
		free, err := h.opts.freeBytes()
		if err != nil {
			return room{}, unavailable(err)
		}
		spare = int64(min(free, 1<<62)) - h.opts.MinFreeBytes
		if spare <= 0 || contentLength > spare {
			return room{}, insufficientStorage()
		}
	}
	rm := room{limit: h.opts.MaxBodyBytes, by: boundBody}
	if left < rm.limit {
		rm = room{limit: left, by: boundQuota}
	}
	if totalLeft < rm.limit {
		rm = room{limit: totalLeft, by: boundTotal}
	}
	if budgetLeft.limit < rm.limit {
		rm = budgetLeft
	}
	if spare < rm.limit {
		rm = room{limit: spare, by: boundSpace}
	}
	return rm, nil
}
