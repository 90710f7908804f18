package filter

import (
	"math"
	"testing"
)

var mathPow = math.Pow

func TestZZEst(t *testing.T) {
	for _, lines := range []int{1, 2} {
		for _, lanes := range []int{5, 6} {
			b, _ := EstimateLaneTableBytes(LaneTableOptions{Lanes: lanes, Capacity: 4 << 20, FalsePositiveRate: 0.01 * 31 / 32, Lines: lines})
			tb, _ := NewLaneTable(LaneTableOptions{Lanes: lanes, Capacity: 4 << 20, FalsePositiveRate: 0.01 * 31 / 32, Lines: lines})
			t.Logf("lines %d lanes %d: %.3f B per lane-key, per window key %.3f, k %d", lines, lanes, float64(b)/float64(4<<20)/float64(lanes), float64(b)/float64(16<<20), tb.K())
		}
	}
	t.Logf("blocked per gen at fp/5: %.3f B/key", blockedBytes(4<<20, 1-pow(0.99, 0.2))/float64(4<<20))
}

func pow(a, b float64) float64 { return mathPow(a, b) }
