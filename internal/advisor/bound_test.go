package advisor

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// advBound is the Cramér-Rao bound on the relative standard error of the
// leaks of a window that the advisor's histogram allows: the inverse of the
// Fisher information of the Poisson histogram at the true delay
// distribution d (ages in windows), p duplicates per original, for a
// stream of originals at rate per second lasting dur, with the engine's
// geometry (window, 4 generations, 1 key in sample kept horizon windows
// past the window). No unbiased estimator of the leaks from these counts
// has a smaller relative error.
func advBound(t *testing.T, d delayDist, p, rate float64, dur, window time.Duration, sample, horizon int) float64 {
	t.Helper()
	h, _ := expectedHistogram(d, p, rate, dur, window, sample, horizon)
	fit := delayFit{fam: d.fam, dist: d, p: p}
	switch d.fam {
	case famExponential:
		fit.x = []float64{math.Log(d.a)}
	case famLognormal:
		fit.x = []float64{d.a, math.Log(d.b)}
	case famTwoExp:
		fit.x = []float64{math.Log(d.w / (1 - d.w)), math.Log(d.a), math.Log(d.b)}
	}
	fit.setCov(h)
	if fit.cov == nil {
		t.Fatalf("%v: information not invertible", d)
	}
	return fit.relErr(func(p float64, d delayDist) float64 { return p * d.leakShare(1, 4) })
}

// expectedHistogram is the advisor's histogram at the end of a stream of
// originals at rate per second lasting dur, with the engine's geometry
// (window, 4 generations, 1 key in sample kept horizon windows past the
// window), each bin's count its expectation under d and p; j0 is the
// first bin past the window.
func expectedHistogram(d delayDist, p, rate float64, dur, window time.Duration, sample, horizon int) (h *histogram, j0 int) {
	var w Advisor
	w.setGeometry(window, 4, horizon)
	K, b := w.binsPerSpan, float64(w.bin)
	// Exposure at the stream's end: cohort g, rate*span originals, has
	// lived dur - g*span.
	expo := make([]float64, w.nbins)
	for g := int64(0); g*w.span < int64(dur); g++ {
		age := float64(int64(dur) - g*w.span)
		n := rate * float64(w.span) / 1e9
		if age < float64(w.span) {
			n *= age / float64(w.span)
		}
		for j := range expo {
			f := clampUnit((age - float64(j)*b) / b)
			if f == 0 {
				break
			}
			expo[j] += n * f
		}
	}
	jm := 0
	for jm < w.nbins && expo[jm] >= 0.05*expo[0] {
		jm++
	}
	h = &histogram{width: b / float64(window), k: K, w: make([]float64, jm), y: make([]float64, jm)}
	for j := range jm {
		h.w[j] = expo[j]
		if j >= w.j0 {
			h.w[j] /= float64(sample)
		}
	}
	for j, m := range h.masses(d) {
		h.y[j] = p * h.w[j] * m
	}
	return h, w.j0
}

// budgetSample is the sample the default horizon budget settles at for a
// stream of rate originals per second lasting dur and a window of 4
// generations: the horizon holds Window + span + 8 Windows of keys (all of
// them in a shorter stream), 4 bytes each and about one of Bloom filter,
// plus up to a fifth for the slices' growth.
func budgetSample(rate float64, window, dur time.Duration) int {
	keys := rate * min((1.25+HorizonWindows)*window.Seconds(), dur.Seconds())
	s := 1
	for 6*keys/float64(s) > DefaultHorizonBytes {
		s *= 2
	}
	return s
}

// TestAdvisorBound states what the histogram can tell on the stream of
// `dedupbench advisor --duration 20m --rate 200` (about 4,300 duplicates:
// 196 originals/s, 1 in 49 duplicated): the Cramér-Rao bound on the
// relative error of the current window's leaks, windows 2, 3, 5 and 8
// minutes, at the sample the default budget keeps (every key at this
// rate) and the horizon of 8 windows. Exponential (mean 2 min) and
// lognormal (mean 2 min, sigma 1) delays allow 3% to 10%, so within 20% in
// about 19 runs out of 20; the mixture (80% mean 10 s, 20% mean 10 min)
// allows 10% to 18%: within 20% in most runs, nine in ten at the short
// windows. A sample of 1 in 16 leaves the mixture at 36% to 42%; a horizon
// of 3 windows at 14% to 23% (the 2-minute window's ends at 8.5 minutes,
// before the slow hump's mean). The mixture's bound is 11% or less at
// every window from a rate of 566, some 13,600 duplicates in 20 minutes.
func TestAdvisorBound(t *testing.T) {
	const p = 0.02 / 0.98
	windows := []time.Duration{2 * time.Minute, 3 * time.Minute, 5 * time.Minute, 8 * time.Minute}
	type shape struct {
		name string
		dist func(w float64) delayDist // w: the window in seconds
	}
	shapes := []shape{
		{"exponential", func(w float64) delayDist { return delayDist{fam: famExponential, a: 120 / w} }},
		{"lognormal", func(w float64) delayDist {
			return delayDist{fam: famLognormal, a: math.Log(120 * math.Exp(-0.5) / w), b: 1}
		}},
		{"mixture", func(w float64) delayDist { return delayDist{fam: famTwoExp, a: 10 / w, b: 600 / w, w: 0.8} }},
	}
	// bounds returns the bound per window at rate, with the given sample
	// (0: the budget's) and horizon.
	bounds := func(s shape, rate float64, sample, horizon int) (out []float64, samples string) {
		for _, w := range windows {
			n := sample
			if n == 0 {
				n = budgetSample(rate*0.98, w, 20*time.Minute)
			}
			samples += fmt.Sprintf(" 1/%d", n)
			out = append(out, advBound(t, s.dist(w.Seconds()), p, rate*0.98, 20*time.Minute, w, n, horizon))
		}
		return out, samples
	}
	pct := func(xs []float64) string {
		s := ""
		for _, x := range xs {
			s += fmt.Sprintf(" %.0f%%", 100*x)
		}
		return s
	}
	check := func(name string, b []float64, lo, hi float64) {
		t.Helper()
		for i, x := range b {
			if x < lo || x > hi {
				t.Errorf("%s, window %v: bound %.0f%%, want in [%.0f%%, %.0f%%]", name, windows[i], 100*x, 100*lo, 100*hi)
			}
		}
	}
	for _, s := range shapes[:2] {
		b, samples := bounds(s, 200, 0, HorizonWindows)
		t.Logf("%s, rate 200, samples%s:%s", s.name, samples, pct(b))
		check(s.name, b, 0, 0.11)
	}
	mix := shapes[2]
	for _, c := range []struct {
		rate            float64
		sample, horizon int
		lo, hi          float64
	}{
		{200, 0, HorizonWindows, 0.08, 0.20},
		{200, 16, HorizonWindows, 0.30, 1},
		{200, 0, 3, 0.12, 0.25},
		{566, 0, HorizonWindows, 0, 0.12},
	} {
		b, samples := bounds(mix, c.rate, c.sample, c.horizon)
		name := fmt.Sprintf("mixture, rate %v, horizon %d windows, samples%s", c.rate, c.horizon, samples)
		t.Logf("%s:%s", name, pct(b))
		check(name, b, c.lo, c.hi)
	}
	// The duplicates a 20-minute stream holds at the rates where the
	// mixture's bound falls under 12% at every window.
	for rate := 200.0; rate <= 12800; rate *= math.Sqrt2 {
		b, samples := bounds(mix, rate, 0, HorizonWindows)
		t.Logf("mixture, rate %.0f (%.0f duplicates), samples%s:%s", rate, rate*0.02*1200, samples, pct(b))
	}
}
