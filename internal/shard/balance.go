package shard

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// state is one replica's view of the assignment at one step.
type state struct {
	self    string
	spokes  []string          // the fleet, sorted, without duplicates
	members []string          // live replicas other than self, sorted
	holder  map[string]string // spoke → its live holder other than self, for every spoke Lease (also outside the fleet)
	mine    []string          // spokes self holds and acts on
	leaving []string          // spokes self still holds while their runs stop
	// longFree: fleet spokes free for a whole lease duration in self's eyes.
	longFree map[string]bool
}

// plan is what one step does: give up, then acquire.
type plan struct {
	release []release
	acquire []string
}

type release struct{ spoke, why string }

// decide is the balancing rule. The fair share is target =
// ceil(spokes/replicas). A replica gives up spokes gone from the fleet and
// what it holds above target. Below target it acquires free spokes only if
// no live replica holds fewer than it does, and then at most its part of
// the free ones: replicas that start together split the fleet in a few
// steps, and a spoke freed for a replica that joined goes to that replica
// rather than back. A spoke free for a whole lease duration may be taken by
// anyone below target, so that a replica that never acquires (a fleet that
// differs from ours) cannot leave it orphaned. When nothing is free and the
// loads differ by two or more, one replica of the most loaded — the first
// by identity, so that only one moves — gives one spoke up. Which spokes a
// replica takes or gives up follows rank, so that it keeps the same ones
// across steps instead of swapping with its peers.
func decide(s state) plan {
	var p plan
	inFleet := map[string]bool{}
	for _, sp := range s.spokes {
		inFleet[sp] = true
	}
	var kept []string
	for _, sp := range s.mine {
		if inFleet[sp] {
			kept = append(kept, sp)
		} else {
			p.release = append(p.release, release{sp, "gone from the fleet"})
		}
	}
	target := (len(s.spokes) + len(s.members)) / (len(s.members) + 1) // ceil(spokes / replicas)
	if len(kept) > target {
		for _, sp := range byRank(kept, s.self)[target:] {
			p.release = append(p.release, release{sp, "more than the fair share"})
		}
		return p
	}
	held := len(s.mine) + len(s.leaving)
	low, high := loads(s, held)
	free := freeSpokes(s)
	if held < target && len(free) > 0 {
		n, cands := target-held, free
		if held > low {
			cands = slices.DeleteFunc(slices.Clone(free), func(sp string) bool { return !s.longFree[sp] })
		} else {
			poorest := 1 // self
			for _, m := range s.members {
				if count(s, m) == low {
					poorest++
				}
			}
			n = min(n, (len(free)+poorest-1)/poorest)
		}
		if n = min(n, len(cands)); n > 0 {
			p.acquire = byRank(cands, s.self)[:n]
		}
		return p
	}
	if len(free) == 0 && len(p.release) == 0 && len(s.leaving) == 0 && len(kept) > 0 &&
		held == high && high-low >= 2 && firstAt(s, high, held) {
		ranked := byRank(kept, s.self)
		p.release = append(p.release, release{ranked[len(ranked)-1], "rebalance: another replica holds two fewer"})
	}
	return p
}

// count is how many spoke Leases member m holds live.
func count(s state, m string) int {
	n := 0
	for _, h := range s.holder {
		if h == m {
			n++
		}
	}
	return n
}

// loads returns the lowest and highest count among the live replicas,
// self (holding held) included.
func loads(s state, held int) (low, high int) {
	low, high = held, held
	for _, m := range s.members {
		c := count(s, m)
		low, high = min(low, c), max(high, c)
	}
	return low, high
}

// firstAt: self is the first by identity among the replicas holding high.
func firstAt(s state, high, held int) bool {
	for _, m := range s.members {
		if m < s.self && count(s, m) == high {
			return false
		}
	}
	return held == high
}

// freeSpokes are the fleet's spokes nobody holds live, in fleet order.
func freeSpokes(s state) []string {
	taken := map[string]bool{}
	for _, sp := range s.mine {
		taken[sp] = true
	}
	for _, sp := range s.leaving {
		taken[sp] = true
	}
	var free []string
	for _, sp := range s.spokes {
		if _, ok := s.holder[sp]; !ok && !taken[sp] {
			free = append(free, sp)
		}
	}
	return free
}

// byRank orders spokes by how much identity prefers them, most first: a
// hash of both, so each replica prefers different spokes (fewer collisions
// when several acquire at once) and the same ones every time.
func byRank(spokes []string, identity string) []string {
	out := slices.Clone(spokes)
	slices.SortFunc(out, func(x, y string) int { return cmp.Compare(rank(y, identity), rank(x, identity)) })
	return out
}

func rank(spoke, identity string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(spoke))
	h.Write([]byte{0})
	h.Write([]byte(identity))
	return h.Sum64()
}
