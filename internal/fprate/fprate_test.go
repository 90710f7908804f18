package fprate

import (
	"math"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestAny(t *testing.T) {
	for _, c := range []struct {
		ps   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{0.01}, 0.01},
		{[]float64{0.01, 0.01}, 1 - 0.99*0.99},
		{[]float64{0.5, 0.5, 0.5}, 0.875},
		{[]float64{1, 0.1}, 1},
	} {
		if got := Any(c.ps...); !near(got, c.want) {
			t.Errorf("Any(%v) = %v, want %v", c.ps, got, c.want)
		}
	}
}

func TestMean(t *testing.T) {
	if got := Mean(nil); got != 0 {
		t.Errorf("Mean(nil) = %v, want 0", got)
	}
	// Two shards: one with two generations at 0.5 (0.75), one empty (0).
	if got := Mean([][]float64{{0.5, 0.5}, nil}); !near(got, 0.375) {
		t.Errorf("Mean = %v, want 0.375", got)
	}
}
