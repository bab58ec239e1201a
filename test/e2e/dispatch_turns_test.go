package e2e

import (
	"slices"
	"testing"
)

// The dispatch benchmarks' sides must pay alike for a drift of the spokes
// up to degree m−1: every side takes as many turns, and the sums of its
// turn numbers' powers below m are every other side's.
func TestTurnOrderCancelsDrift(t *testing.T) {
	if order, _ := turnOrder(2); len(order) < 8 || !slices.Equal(order[:8], []int{0, 1, 1, 0, 1, 0, 0, 1}) {
		t.Fatalf("two sides: %v, want ABBA BAAB first", order)
	}
	for k, want := range map[int]struct{ turns, m int }{2: {32, 5}, 3: {27, 3}, 4: {64, 3}} {
		order, m := turnOrder(k)
		if len(order) != want.turns || m != want.m {
			t.Fatalf("%d sides: %d turns, m %d; want %d, %d", k, len(order), m, want.turns, want.m)
		}
		var sums [4][5]int // by side, Σ t^p for p < m
		for turn, side := range order {
			power := 1
			for p := range m {
				sums[side][p] += power
				power *= turn
			}
		}
		for side := 1; side < k; side++ {
			if sums[side] != sums[0] {
				t.Errorf("%d sides: side %d's sums of turn powers below %d are %v, side 0's %v", k, side, m, sums[side][:m], sums[0][:m])
			}
		}
	}
}
