package advisor

import (
	"math"
	"testing"
	"time"
)

// The horizon's false matches are a known background in the fit, not a
// tail: an exponential stream (mean half the window) whose old bins hold
// the odd false match, as many as expected, is fitted as the exponential
// with its leaks, where reading those matches as duplicates takes a second
// exponential of mean hours and doubles the leaks.
func TestFitFalseMatchesAreBackground(t *testing.T) {
	d := delayDist{fam: famExponential, a: 0.5}
	const p = 0.25
	h, j0 := expectedHistogram(d, p, 600, 12*time.Minute, time.Minute, 1, 8)
	truth := p * d.leakShare(1, 4)
	// One false match expected every 8 bins past the window, each drawn
	// where expected (every 8th bin).
	h.g = make([]float64, len(h.y))
	for j := j0; j < len(h.y); j++ {
		h.g[j] = 1.0 / 8
		if (j-j0)%8 == 7 {
			h.y[j]++
		}
	}
	m, ok := fitDelays(h)
	if !ok || m.fam != famExponential {
		t.Fatalf("fitted %v (fits %v), want the exponential", m.dist.describe(time.Minute), ok)
	}
	if got := m.p * m.dist.leakShare(1, 4); math.Abs(got/truth-1) > 0.05 {
		t.Errorf("leaks %.3g, truth %.3g", got, truth)
	}
}
