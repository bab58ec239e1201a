package placement

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Candidate is one spoke as the caller found it, one per spoke in profile
// order.
type Candidate struct {
	Cluster string
	// Excluded, when set, is why the spoke cannot take the pod at all
	// ("class gpu not offered", "unreachable", "draining", "may not
	// create pods"); it is the spoke's reason as shown.
	Excluded string
	// View: the spoke has a synced capacity view; the fields below hold
	// only with it.
	View bool
	// Fits: some node takes the pod now.
	Fits bool
	// Reason is why no node takes the pod now (!Fits), in kube-scheduler's
	// style ("1 of 4 nvidia.com/gpu free (needs 2)").
	Reason string
	// Resource names the pod's scarcest requested resource on this spoke;
	// Free is how much of it the nodes that take the pod now have free (the
	// score), and Total how much the nodes that would take it if empty have
	// (where to wait). Amounts compare only when every view names the same
	// resource: a CPU pod's scarcest may be cpu on one spoke and memory on
	// another, and then order decides.
	Resource string
	Free     int64
	Total    int64
	// Queued is how much of Resource the spoke's pods no node took yet ask
	// for: the queue a pod that waits there joins.
	Queued int64
}

// Request is what the submitter asked of placement.
type Request struct {
	// Preference is the submitter's ordered list (clusters: [a, b]);
	// empty: any spoke, by score.
	Preference []string
	// Strict: refuse when nothing fits now instead of waiting.
	Strict bool
	// Tried are the spokes a spilled pod was on already; it never goes
	// back to one.
	Tried []string
}

// Decision is where the pod goes and why, kept with the row.
type Decision struct {
	Cluster string
	// Waits: nothing fit now; Cluster is where the pod waits (the most
	// Total for it).
	Waits bool
	// Reasons has every spoke's reason, in profile order.
	Reasons []Reason
}

// Reason is one spoke's reason: "fits (4 nvidia.com/gpu free)", "1 of 4
// nvidia.com/gpu free (needs 2)", "class gpu not offered", "tried before".
type Reason struct {
	Cluster string
	Text    string
}

// String is the decision in kube-scheduler's style: "wharf: 1 of 4
// nvidia.com/gpu free (needs 2); dock: class gpu not offered; pier:
// unreachable".
func (d Decision) String() string {
	return joinReasons(d.Reasons)
}

// ErrUnknownCluster: the preference list names a cluster that is not among
// the candidates. The API refuses such a list with 400 before deciding;
// this is the caller's bug, never the submitter's 409.
var ErrUnknownCluster = errors.New("not a candidate cluster")

// NoFitError is Decide's refusal, which the API answers with 409 and every
// spoke's reason: no spoke can take the pod at all, or (Strict) a spoke
// could, but none fits it now and the submitter would not wait.
type NoFitError struct {
	Strict  bool
	Reasons []Reason
}

func (e *NoFitError) Error() string {
	what := "no cluster can take the pod"
	if e.Strict {
		what = "no cluster fits the pod now (placement strict)"
	}
	if len(e.Reasons) == 0 {
		return what + ": no clusters"
	}
	return what + ": " + joinReasons(e.Reasons)
}

// The texts Decide words itself; the others are the caller's.
const (
	textTried       = "tried before"
	textNotListed   = "not in the preference list"
	textNoView      = "no capacity view"
	textDoesNotFit  = "does not fit now"
	textFits        = "fits"
	reasonSeparator = "; "
)

// Decide places a pod by the package's rules (see the package doc): the
// chosen spoke, whether the pod waits there, and every spoke's reason. An
// error is a *NoFitError (409), ErrUnknownCluster wrapped with the name,
// or a candidate without a cluster name.
func Decide(req Request, candidates []Candidate) (Decision, error) {
	if err := check(req, candidates); err != nil {
		return Decision{}, err
	}
	reasons := make([]Reason, len(candidates))
	for i, c := range candidates {
		reasons[i] = Reason{Cluster: c.Cluster, Text: reasonText(req, c)}
	}
	scored := oneResource(candidates)
	var chosen int
	if len(req.Preference) > 0 {
		chosen = firstPreferred(req, candidates)
	} else {
		chosen = bestScored(req, candidates, scored)
	}
	if chosen >= 0 {
		return Decision{Cluster: candidates[chosen].Cluster, Reasons: reasons}, nil
	}
	wait := mostTotal(req, candidates, scored)
	if wait < 0 || req.Strict {
		return Decision{}, &NoFitError{Strict: wait >= 0, Reasons: reasons}
	}
	return Decision{Cluster: candidates[wait].Cluster, Waits: true, Reasons: reasons}, nil
}

// check refuses a candidate without a name, and a preference naming a
// cluster that is not among the candidates. Names are the profile's, unique
// by its validation; checking that again would be most of a decision's
// cost over a hundred spokes.
func check(req Request, candidates []Candidate) error {
	for i, c := range candidates {
		if c.Cluster == "" {
			return fmt.Errorf("candidate %d: empty cluster name", i)
		}
	}
	for _, name := range req.Preference {
		if indexOf(candidates, name) < 0 {
			return fmt.Errorf("clusters: %q: %w", name, ErrUnknownCluster)
		}
	}
	return nil
}

// standing is where a spoke stands for this request.
type standing int

const (
	out     standing = iota // excluded, tried or not listed
	fits                    // its view says some node takes the pod now
	unknown                 // no view: it may fit
	full                    // its view says no node takes the pod now
)

func standingOf(req Request, c Candidate) standing {
	switch {
	case c.Excluded != "" || slices.Contains(req.Tried, c.Cluster):
		return out
	case len(req.Preference) > 0 && !slices.Contains(req.Preference, c.Cluster):
		return out
	case !c.View:
		return unknown
	case c.Fits:
		return fits
	default:
		return full
	}
}

// reasonText words c's standing. Tried comes before Excluded: a spoke the
// pod left is out for good, whatever its state now.
func reasonText(req Request, c Candidate) string {
	switch {
	case slices.Contains(req.Tried, c.Cluster):
		return textTried
	case c.Excluded != "":
		return c.Excluded
	case len(req.Preference) > 0 && !slices.Contains(req.Preference, c.Cluster):
		return textNotListed
	case !c.View:
		return textNoView
	case !c.Fits && c.Reason != "":
		return c.Reason
	case !c.Fits:
		return textDoesNotFit
	case c.Resource == "":
		return textFits
	default:
		return textFits + " (" + strconv.FormatInt(c.Free, 10) + " " + c.Resource + " free)"
	}
}

// firstPreferred is the first listed spoke that fits or has no view, or -1.
func firstPreferred(req Request, candidates []Candidate) int {
	for _, name := range req.Preference {
		i := indexOf(candidates, name)
		if s := standingOf(req, candidates[i]); s == fits || s == unknown {
			return i
		}
	}
	return -1
}

// oneResource reports whether every view that names the pod's scarcest
// resource names the same one, so that their amounts compare.
func oneResource(candidates []Candidate) bool {
	name := ""
	for _, c := range candidates {
		switch {
		case !c.View || c.Resource == "":
		case name == "":
			name = c.Resource
		case c.Resource != name:
			return false
		}
	}
	return true
}

// bestScored is the spoke that fits with the most Free (scored; the first
// in profile order on a tie or unscored), else the first without a view,
// or -1.
func bestScored(req Request, candidates []Candidate, scored bool) int {
	best, noView := -1, -1
	for i, c := range candidates {
		switch standingOf(req, c) {
		case fits:
			if best < 0 || scored && c.Free > candidates[best].Free {
				best = i
			}
		case unknown:
			if noView < 0 {
				noView = i
			}
		}
	}
	if best >= 0 {
		return best
	}
	return noView
}

// mostTotal is where a pod that fits nowhere now waits: the full spoke
// whose queue is shortest for its capacity (Queued ÷ Total; scored), ties
// — and unscored — to the most Total, then the preference list's order,
// else profile order; -1 if none would take the pod even empty. Without
// the queue every waiting pod would pile onto the one biggest spoke while
// another of the same size sits idle.
func mostTotal(req Request, candidates []Candidate, scored bool) int {
	best := -1
	consider := func(i int) {
		c := candidates[i]
		if standingOf(req, c) != full || c.Total <= 0 {
			return
		}
		if best < 0 || scored && waitsLess(c, candidates[best]) {
			best = i
		}
	}
	if len(req.Preference) > 0 {
		for _, name := range req.Preference {
			consider(indexOf(candidates, name))
		}
		return best
	}
	for i := range candidates {
		consider(i)
	}
	return best
}

// waitsLess reports whether a pod waits less on a than on b: a shorter
// queue for its capacity, or as short with more capacity.
func waitsLess(a, b Candidate) bool {
	// a.Queued/a.Total < b.Queued/b.Total, without dividing.
	qa, qb := float64(a.Queued)*float64(b.Total), float64(b.Queued)*float64(a.Total)
	if qa != qb {
		return qa < qb
	}
	return a.Total > b.Total
}

func indexOf(candidates []Candidate, name string) int {
	return slices.IndexFunc(candidates, func(c Candidate) bool { return c.Cluster == name })
}

func joinReasons(reasons []Reason) string {
	var b strings.Builder
	for i, r := range reasons {
		if i > 0 {
			b.WriteString(reasonSeparator)
		}
		b.WriteString(r.Cluster)
		b.WriteString(": ")
		b.WriteString(r.Text)
	}
	return b.String()
}
