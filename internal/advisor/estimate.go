package advisor

import (
	"fmt"
	"math"
	"time"

	"github.com/streamdedup/dedup/rotate"
)

// Advice is the window advisor's estimate, dedup.Stats.WindowAdvice: how late
// duplicates come, how many the window lets through, and which window
// would let fewer through. docs/window.md describes the estimator.
//
// Delays are measured from a key's first sighting within the window, at
// the resolution of an age bin (an eighth of a generation's span with
// fewer than 16 generations), up to Horizon, and a delay distribution is
// fitted to them (Model): the leaks and windows come from it, past Horizon
// from it alone. Counts restart at Open: a restored generation's keys are
// not counted.
type Advice struct {
	// Caught counts the duplicates the window caught whose first sighting
	// the advisor saw; HorizonMatches the keys of its sample (1 in Sample
	// of the hash space) seen again after the window had let them go. The
	// estimate rests on Duplicates: Caught + Late + Sample*HorizonMatches.
	Caught, HorizonMatches, Duplicates uint64
	// Late counts, under [github.com/streamdedup/dedup.Options.EventTime], the keys observed again
	// while in flight, after their first sighting had left the window:
	// New again, let through and counted exactly.
	Late uint64
	// Censored counts the keys still inside the window without a
	// duplicate so far: some of them will get one later.
	Censored uint64
	// Horizon is the oldest delay measured so far: at most Window + span
	// + 8 Windows, less until the stream has run that long.
	Horizon time.Duration
	// DuplicatesPerMillion is the duplicates per million events observed,
	// at any delay: caught, let through, or in the fitted tail.
	DuplicatesPerMillion float64
	// LeaksPerMillion is the duplicates the current window lets through,
	// per million events observed, and LeaksRelErr its relative standard
	// error (sampling only: not the error of a Model that fits the delays
	// measured but not those past Horizon); TailLeaksPerMillion is the
	// part of it past Horizon, from the model alone. 0 with LeaksRelErr 0
	// means none measured.
	LeaksPerMillion, LeaksRelErr, TailLeaksPerMillion float64
	// Model describes the delay distribution the estimate rests on: a
	// family fitted to every delay measured ("exponential, mean 2m0s",
	// "lognormal, median 1m12.8s, sigma 1.00", "two exponentials, 80%
	// mean 10s + 20% mean 10m0s"), or, when none fits the measured
	// delays, "measured, exponential tail of mean ..." (the histogram up
	// to Horizon and an exponential fitted past half the window) or
	// "measured, no tail past the horizon" (nothing past Horizon is
	// counted and the windows that need it are 0). Empty before the
	// first estimate.
	Model string
	// DelayP50, DelayP90 and DelayP99 are quantiles of the duplicates'
	// delay since their key's first sighting; 0 when not known.
	DelayP50, DelayP90, DelayP99 time.Duration
	// WindowFor100, WindowFor10 and WindowFor1 are the smallest Window,
	// with the same Generations, that would let at most 100, 10 and 1
	// duplicates per million events through; 0 when not known (no
	// duplicates yet, or past Horizon without a tail fit).
	WindowFor100, WindowFor10, WindowFor1 time.Duration
	// Sample is the horizon's sample now: it keeps 1 key in Sample, a
	// power of two that starts at [github.com/streamdedup/dedup.Options.HorizonSample] and doubles
	// whenever the horizon would outgrow BudgetBytes; 0 without a horizon.
	Sample uint64
	// Bytes is the memory the advisor takes, mostly its horizon's sample,
	// and BudgetBytes the horizon's budget ([github.com/streamdedup/dedup.Options.HorizonBytes]).
	Bytes, BudgetBytes uint64
}

// Totals is the advisor's counts summed over shards, for an estimate.
type Totals struct {
	adv           *Advisor
	caught, leaks []uint64
	late          []uint64
	fpExp, leakFP []float64
	cohorts       map[uint64]*cohort
	foldedN       uint64
	bytes         uint64
	// fpByLevel[l] sums the leakFP of the shards at sample level l; level
	// is the highest level any shard is at.
	fpByLevel [rotate.HorizonLevels][]float64
	level     int
}

// NewTotals returns empty totals for [Totals.Add].
func (a *Advisor) NewTotals() *Totals {
	n := a.nbins
	return &Totals{adv: a, caught: make([]uint64, n), late: make([]uint64, n), leaks: make([]uint64, n), fpExp: make([]float64, n),
		leakFP: make([]float64, n), cohorts: map[uint64]*cohort{}}
}

// Add sums a shard's advisor into t; the shard's lock is held.
func (t *Totals) Add(a *Shard) {
	for j := range t.caught {
		t.caught[j] += a.caught[j]
		t.late[j] += a.late[j]
		t.fpExp[j] += a.fpExp[j]
	}
	if a.horizon != nil {
		t.level = max(t.level, a.level)
		fp := t.fpByLevel[a.level]
		if fp == nil {
			fp = make([]float64, len(t.caught))
			t.fpByLevel[a.level] = fp
		}
		for j, x := range a.leakFP {
			fp[a.adv.j0+j] += x
		}
	}
	for id, c := range a.cohorts {
		m := t.cohorts[id]
		if m == nil {
			m = &cohort{}
			t.cohorts[id] = m
		}
		m.n += c.n
		m.dups += c.dups
	}
	t.foldedN += a.foldedN
	t.bytes += a.Bytes()
}

// collect sets leaks and leakFP to the horizon's counts of the sample at
// the engine's level (matches of the levels from it up; the false matches
// expected of each shard, scaled as Shard.sync does), and returns the
// sample factor, 2^level (0 without a horizon). It adds the engine-wide
// counts' memory to bytes.
func (t *Totals) collect(w *Advisor) int {
	if !w.horizon {
		return 0
	}
	t.level = max(t.level, int(w.level.Load()))
	for l := range w.matches {
		t.bytes += 8 * uint64(len(w.matches[l]))
		if l < t.level {
			continue
		}
		for j := range w.matches[l] {
			t.leaks[w.j0+j] += w.matches[l][j].Load()
		}
	}
	for l, fp := range t.fpByLevel {
		if l > t.level {
			continue // cannot be: t.level is the highest
		}
		scale := math.Pow(4, -float64(t.level-l))
		for j, x := range fp {
			t.leakFP[j] += x * scale
		}
	}
	return 1 << t.level
}

// Advice turns the totals into the estimate at now, with observed events
// of which news were New.
func (t *Totals) Advice(now time.Time, observed, news uint64) Advice {
	w := t.adv
	var adv Advice
	adv.Bytes = t.bytes
	adv.BudgetBytes = w.budget
	sampleN := t.collect(w)
	adv.Sample = uint64(sampleN)
	nb := w.nbins
	K := w.binsPerSpan
	b := float64(w.bin)
	span := float64(w.span)
	ns := now.UnixNano()
	j0 := (w.cfg.Generations + 1) * K // first bin past the window: age Window + span
	sample := float64(sampleN)
	// Exposure: originals times the share of each bin their cohort has
	// lived through. A cohort still current has seen age/span of its keys
	// so far; under uniform arrivals its size is n*span/age.
	expo := make([]float64, nb)
	for id, c := range t.cohorts {
		age := float64(ns - int64(id)*w.span)
		if age <= 0 || c.n == 0 {
			continue
		}
		n := float64(c.n)
		if age < span {
			n *= span / age
		} else if age < float64(j0)*b {
			adv.Censored += c.n - min(c.n, c.dups)
		}
		for j := range nb {
			f := clampUnit((age - float64(j)*b) / b)
			if f == 0 {
				break
			}
			expo[j] += n * f
		}
	}
	for j := range expo {
		expo[j] += float64(t.foldedN)
	}
	// D: duplicates per bin, false matches subtracted (the measured
	// estimate when no model fits; the fit keeps them as a background);
	// V their variance.
	d := make([]float64, nb)
	v := make([]float64, nb)
	for j := range nb {
		adv.Caught += t.caught[j]
		adv.HorizonMatches += t.leaks[j]
		adv.Late += t.late[j]
		seen := float64(t.caught[j] + t.late[j])
		d[j] = seen - t.fpExp[j] + sample*(float64(t.leaks[j])-t.leakFP[j])
		v[j] = seen + sample*sample*float64(t.leaks[j])
	}
	adv.Duplicates = adv.Caught + adv.Late + adv.Sample*adv.HorizonMatches
	// The measured range: bins exposed to at least 5% of the originals.
	jm := 0
	for jm < nb && expo[jm] > 0 && expo[jm] >= 0.05*expo[0] && (jm < j0 || sample > 0) {
		jm++
	}
	adv.Horizon = time.Duration(float64(jm) * b)
	if jm < 2*K || observed == 0 {
		return adv
	}
	perEvent := float64(news) / float64(observed)
	gens := float64(w.cfg.Generations)
	window := float64(w.cfg.Window)
	// The delay model, fitted to every bin measured; ages in windows.
	h := &histogram{width: b / window, k: K, w: make([]float64, jm), y: make([]float64, jm), g: make([]float64, jm)}
	for j := range jm {
		h.w[j] = expo[j]
		h.y[j] = float64(t.caught[j]+t.late[j]) + sample*float64(t.leaks[j])
		h.g[j] = t.fpExp[j] + sample*t.leakFP[j]
		if j >= j0 {
			h.w[j], h.y[j], h.g[j] = h.w[j]/sample, h.y[j]/sample, h.g[j]/sample
		}
	}
	if m, ok := fitDelays(h); ok {
		modelAdvice(&adv, &m, perEvent, gens, window, float64(max(jm, j0))*b/window, b)
		return adv
	}
	q := make([]float64, jm)
	for j := range jm {
		q[j] = d[j] / expo[j]
	}
	// Tail: an exponential fitted to the measured range past half the
	// window.
	fit := tailFit{}
	lo := (w.cfg.Generations * K) / 2
	if jm-lo >= 2 {
		fit = fitTail(q, d, v, expo, lo, jm, j0, b, float64(w.cfg.Window), sample)
	}
	if fit.relErr >= 1 {
		fit = tailFit{} // too unsure to extrapolate
	}
	adv.Model = "measured, no tail past the horizon"
	if fit.ok {
		adv.Model = fmt.Sprintf("measured, exponential tail of mean %v (±%.0f%%)", time.Duration(fit.theta).Round(100*time.Millisecond), 100*fit.relErr)
	}
	// q extended past the measured range by the fit, far enough for the
	// windows asked.
	ext := jm
	if fit.ok {
		ext = min(jm+int(40*fit.theta/b)+nb, 1<<20)
	}
	qx := make([]float64, ext)
	copy(qx, q)
	for j := jm; j < ext; j++ {
		qx[j] = fit.binMass(j, b)
	}
	tailPast := func(a float64) float64 {
		if !fit.ok {
			return 0
		}
		return fit.massPast(a)
	}
	total := 0.0
	for _, x := range q {
		total += x
	}
	total += tailPast(float64(jm) * b)
	adv.DuplicatesPerMillion = 1e6 * perEvent * total
	// Leaks of the current window: the mass at cohort ages past Window +
	// span.
	leak, leakVar := 0.0, 0.0
	for j := j0; j < jm; j++ {
		leak += q[j]
		leakVar += v[j] / (expo[j] * expo[j])
	}
	tail := tailPast(float64(max(jm, j0)) * b)
	adv.TailLeaksPerMillion = 1e6 * perEvent * tail
	leak += tail
	leakVar += math.Pow(tail*fit.tailRelErr(float64(max(jm, j0))*b), 2)
	adv.LeaksPerMillion = 1e6 * perEvent * leak
	if leak > 0 {
		adv.LeaksRelErr = math.Sqrt(leakVar) / leak
	}
	// Rbar(t), the duplicates per original later than t, at bin j's middle:
	// K times the sum of q every span past j (span*sum rho(t + k*span)).
	suffix := make([]float64, ext+K)
	for j := ext - 1; j >= 0; j-- {
		suffix[j] = qx[j] + suffix[j+K]
	}
	// Rbar is measured below ext - span; past it, with a fit, the fit
	// answers. Without one, the measured Rbar counts the delays up to
	// Horizon only.
	known := float64(ext) * b
	rbar := func(t float64) (float64, bool) {
		j := int(max(t/b-0.5, 0))
		if j+1+K >= ext {
			if fit.ok {
				return fit.rbar(t, span), true
			}
			return 0, false
		}
		f := max(t/b-0.5, 0) - float64(j)
		r0 := float64(K) * suffix[j+K]
		r1 := float64(K) * suffix[j+1+K]
		return r0*(1-f) + r1*f, true
	}
	if total > 0 {
		adv.DelayP50 = quantile(rbar, total, 0.5, b, known)
		adv.DelayP90 = quantile(rbar, total, 0.9, b, known)
		adv.DelayP99 = quantile(rbar, total, 0.99, b, known)
	}
	// leaksAt is the leaks per million events of a window W' with the same
	// generations: the mean of Rbar over retentions [W', W' + W'/N].
	leaksAt := func(win float64) (float64, bool) {
		if !fit.ok {
			return 0, false
		}
		const steps = 16
		sum := 0.0
		for i := range steps {
			r, ok := rbar(win * (1 + (float64(i)+0.5)/steps/gens))
			if !ok {
				return 0, false
			}
			sum += r
		}
		return 1e6 * perEvent * sum / steps, true
	}
	setWindowsFor(&adv, leaksAt, window, b)
	return adv
}

// setWindowsFor sets the windows for 100, 10 and 1 per million.
func setWindowsFor(adv *Advice, leaksAt func(float64) (float64, bool), window, bin float64) {
	for _, x := range []struct {
		target float64
		out    *time.Duration
	}{{100, &adv.WindowFor100}, {10, &adv.WindowFor10}, {1, &adv.WindowFor1}} {
		*x.out = windowFor(leaksAt, window, x.target, bin)
	}
}

// modelAdvice fills adv from the delay model m: ages in windows, horizon
// the end of the ages measured, bin the age bin (ns).
func modelAdvice(adv *Advice, m *delayFit, perEvent, gens, window, horizon, bin float64) {
	dist := m.dist
	perM := 1e6 * perEvent
	adv.Model = dist.describe(time.Duration(window))
	adv.DuplicatesPerMillion = perM * m.p
	leak := func(p float64, d delayDist) float64 { return p * d.leakShare(1, gens) }
	adv.LeaksPerMillion = perM * leak(m.p, dist)
	adv.LeaksRelErr = m.relErr(leak)
	s := 1 / gens
	adv.TailLeaksPerMillion = perM * m.p * max(0, dist.H(horizon-s)-dist.H(horizon)) / s
	adv.DelayP50 = time.Duration(dist.quantile(0.5) * window)
	adv.DelayP90 = time.Duration(dist.quantile(0.9) * window)
	adv.DelayP99 = time.Duration(dist.quantile(0.99) * window)
	setWindowsFor(adv, func(w float64) (float64, bool) { return perM * m.p * dist.leakShare(w/window, gens), true }, window, bin)
}

// windowFor returns the smallest window on a grid of 1/32 octaves from
// window/256 to 4096 windows past which leaksAt stays at most target, or
// 0 if not known.
func windowFor(leaksAt func(float64) (float64, bool), window, target, bin float64) time.Duration {
	best := 0.0
	for k := 12 * 32; k >= -8*32; k-- {
		win := window * math.Exp2(float64(k)/32)
		if win < bin {
			break
		}
		l, ok := leaksAt(win)
		if !ok {
			best = 0 // not known this far: only a window below it can answer
			continue
		}
		if l > target {
			break
		}
		best = win
	}
	return time.Duration(best)
}

// quantile returns the delay by which a share p of the duplicates have
// come: the smallest bin middle t with Rbar(t) <= (1-p) total.
func quantile(rbar func(float64) (float64, bool), total, p, bin, known float64) time.Duration {
	for t := 0.5 * bin; t < 64*known; t += bin {
		r, ok := rbar(t)
		if !ok {
			return 0
		}
		if r <= (1-p)*total {
			return time.Duration(t)
		}
	}
	return 0
}

// tailFit is rho(a) = A exp(-a/theta) per original per ns of cohort age.
type tailFit struct {
	ok     bool
	a      float64 // rho at age 0
	theta  float64 // ns
	relErr float64 // of theta
	qRel   float64 // relative error of the level
	centre float64 // ns: the age the level is measured at
}

// fitTail fits rho(a) = A exp(-a/theta) to the bins [lo, hi) by Poisson
// maximum likelihood: bin j's count has mean expo[j]*b*rho(age_j), divided
// by the sample factor in the horizon (from bin j0), where the counts are the
// sample's. Newton's method from the ratio of the two halves' rates; the
// standard error of theta comes from the Fisher information.
func fitTail(q, d, v, expo []float64, lo, hi, j0 int, b, unit, sample float64) tailFit {
	_ = q
	mid := (lo + hi) / 2
	half := func(from, to int) (rate, centre float64) {
		var dd, ee, ce float64
		for j := from; j < to; j++ {
			dd += d[j]
			ee += expo[j]
			ce += expo[j] * (float64(j) + 0.5) * b
		}
		if dd <= 0 || ee <= 0 {
			return 0, 0
		}
		return dd / ee / b, ce / ee
	}
	r1, c1 := half(lo, mid)
	r2, c2 := half(mid, hi)
	if r1 <= 0 || r2 <= 0 || r2 >= r1 {
		return tailFit{}
	}
	// Ages in units of unit (the window) keep the Newton steps well scaled.
	beta := math.Log(r1/r2) / ((c2 - c1) / unit)
	alpha := math.Log(r2) + beta*c2/unit
	type bin struct{ x, w, y float64 }
	bins := make([]bin, 0, hi-lo)
	for j := lo; j < hi; j++ {
		w := expo[j] * b
		y := d[j]
		if j >= j0 {
			w /= sample
			y /= sample
		}
		bins = append(bins, bin{x: (float64(j) + 0.5) * b / unit, w: w, y: max(y, 0)})
	}
	var iaa, iab, ibb float64
	for range 50 {
		var ga, gb float64
		iaa, iab, ibb = 0, 0, 0
		for _, bn := range bins {
			mu := bn.w * math.Exp(alpha-beta*bn.x)
			ga += bn.y - mu
			gb -= bn.x * (bn.y - mu)
			iaa += mu
			iab -= bn.x * mu
			ibb += bn.x * bn.x * mu
		}
		det := iaa*ibb - iab*iab
		if !(det > 0) {
			return tailFit{}
		}
		da := (ibb*ga - iab*gb) / det
		db := (iaa*gb - iab*ga) / det
		alpha += da
		beta += db
		if math.Abs(da) < 1e-9 && math.Abs(db) < 1e-9 {
			break
		}
	}
	if !(beta > 0) || math.IsInf(alpha, 0) || math.IsNaN(alpha) {
		return tailFit{}
	}
	det := iaa*ibb - iab*iab
	varB := iaa / det
	theta := unit / beta
	// The level at the far end of the fit, where the extrapolation starts.
	xe := float64(hi) * b / unit
	varA := ibb / det
	covAB := -iab / det
	varLevel := varA + xe*xe*varB - 2*xe*covAB
	return tailFit{ok: true, theta: theta, a: math.Exp(alpha),
		relErr: math.Sqrt(varB) / beta, qRel: math.Sqrt(max(varLevel, 0)), centre: float64(hi) * b}
}

// massPast is the integral of rho past age a.
func (f tailFit) massPast(a float64) float64 { return f.a * f.theta * math.Exp(-a/f.theta) }

// binMass is the integral of rho over bin j.
func (f tailFit) binMass(j int, b float64) float64 {
	if !f.ok {
		return 0
	}
	return f.massPast(float64(j)*b) - f.massPast(float64(j+1)*b)
}

// rbar is Rbar(t), the duplicates per original later than t, under the
// fit: with rho(a) = (Rbar(a-span) - Rbar(a))/span, Rbar(t) = C
// exp(-t/theta) with C = A span / (exp(span/theta) - 1).
func (f tailFit) rbar(t, span float64) float64 {
	return f.a * span / math.Expm1(span/f.theta) * math.Exp(-t/f.theta)
}

// tailRelErr is the relative error of massPast(a): the level's and the
// mean's, the latter amplified by the distance extrapolated.
func (f tailFit) tailRelErr(a float64) float64 {
	if !f.ok {
		return 0
	}
	return f.qRel + f.relErr*(1+max(0, a-f.centre)/f.theta)
}
