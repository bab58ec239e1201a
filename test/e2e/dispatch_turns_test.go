package e2e

import (
	"slices"
	"testing"
)

// The held dispatch benchmark's sides must pay alike for a drift of the
// spokes up to the second degree: every side takes as many turns, and the
// sums of its turn numbers and of their squares are every other side's.
func TestTurnOrderCancelsSecondDegreeDrift(t *testing.T) {
	if got, want := turnOrder(2), []int{0, 1, 1, 0, 1, 0, 0, 1}; !slices.Equal(got, want) {
		t.Fatalf("two sides: %v, want ABBA BAAB %v", got, want)
	}
	for k := 2; k <= 4; k++ {
		order := turnOrder(k)
		if len(order) != k*k*k {
			t.Fatalf("%d sides: %d turns, want %d", k, len(order), k*k*k)
		}
		var turns, sum, squares [4]int
		for turn, side := range order {
			turns[side]++
			sum[side] += turn
			squares[side] += turn * turn
		}
		for side := 1; side < k; side++ {
			if turns[side] != turns[0] || sum[side] != sum[0] || squares[side] != squares[0] {
				t.Errorf("%d sides: side %d has %d turns, Σt %d, Σt² %d; side 0 %d, %d, %d",
					k, side, turns[side], sum[side], squares[side], turns[0], sum[0], squares[0])
			}
		}
	}
}
