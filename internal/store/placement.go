package store

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Placement is how the controller chose a row's cluster when the submitter
// let it (cluster "auto" or a preference list), kept with the row so that
// the submitter can read why the pod went where it went. Nil for a row
// whose submitter named its cluster. Set at create.
type Placement struct {
	// Decision is every spoke's reason at the time, on one line, in
	// kube-scheduler's style: "wharf: 1 of 4 nvidia.com/gpu free (needs 2);
	// dock: fits (16 nvidia.com/gpu free)".
	Decision string `json:"decision"`
	// Waits says that nothing fit when it was placed: the pod went where
	// it will wait for capacity.
	Waits bool `json:"waits,omitempty"`
	// Eligible are the clusters the submit could go to (the submitter may
	// create there and the class is offered), in the submitter's order
	// when Ordered (a preference list), else the profile's: a spill-over
	// moves the pod only among them, as the submit was authorized then.
	Eligible []string `json:"eligible,omitempty"`
	Ordered  bool     `json:"ordered,omitempty"`
	// Tried are the clusters the pod left, oldest first; it never goes
	// back to one, and moves at most its class's max_spills times.
	Tried []string `json:"tried,omitempty"`
}

// encodePlacement is the placement column's text: "" for none.
func encodePlacement(p *Placement) (string, error) {
	if p == nil {
		return "", nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("placement: %w", err)
	}
	return string(b), nil
}

// decodePlacement reads the placement column: nil for "".
func decodePlacement(s string) (*Placement, error) {
	if s == "" {
		return nil, nil
	}
	var p Placement
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return nil, fmt.Errorf("placement column: %w", err)
	}
	return &p, nil
}

// samePlacement reports whether a and b say the same.
func samePlacement(a, b *Placement) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Decision == b.Decision && a.Waits == b.Waits && a.Ordered == b.Ordered &&
		slices.Equal(a.Eligible, b.Eligible) && slices.Equal(a.Tried, b.Tried)
}
