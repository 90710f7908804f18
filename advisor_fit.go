package dedup

import (
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/diff/fd"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
)

// The advisor's delay model: a parametric distribution of the duplicates'
// delays, fitted by Poisson maximum likelihood to the whole age histogram
// (caught duplicates in full, the horizon's sample scaled), with censoring
// by cohort age in the exposures. Three families are tried, the one of
// least penalised likelihood kept, and then checked against the histogram; docs/window.md
// explains the model.

// delayFamily names a family of delay distributions.
type delayFamily int

const (
	famExponential delayFamily = iota // one exponential, mean a
	famLognormal                      // lognormal, log-mean a, log-sd b
	famTwoExp                         // w of mean a, 1-w of mean b
	numFamilies
)

// dim is the number of shape parameters.
func (f delayFamily) dim() int { return [...]int{1, 2, 3}[f] }

func (f delayFamily) String() string {
	return [...]string{"exponential", "lognormal", "two exponentials"}[f]
}

// delayDist is one distribution of a family; ages are in units of the
// window.
type delayDist struct {
	fam     delayFamily
	a, b, w float64
}

// dist maps unconstrained parameters x to the family's distribution.
func (f delayFamily) dist(x []float64) delayDist {
	switch f {
	case famLognormal:
		return delayDist{fam: f, a: x[0], b: math.Exp(x[1])}
	case famTwoExp:
		d := delayDist{fam: f, a: math.Exp(x[1]), b: math.Exp(x[2]), w: 1 / (1 + math.Exp(-x[0]))}
		if d.a > d.b {
			d.a, d.b, d.w = d.b, d.a, 1-d.w
		}
		return d
	}
	return delayDist{fam: f, a: math.Exp(x[0])}
}

// upper is the standard normal's upper tail.
func upper(z float64) float64 { return 0.5 * math.Erfc(z/math.Sqrt2) }

// S is P(delay > x).
func (d delayDist) S(x float64) float64 {
	if x <= 0 {
		return 1
	}
	switch d.fam {
	case famLognormal:
		return upper((math.Log(x) - d.a) / d.b)
	case famTwoExp:
		return d.w*math.Exp(-x/d.a) + (1-d.w)*math.Exp(-x/d.b)
	}
	return math.Exp(-x / d.a)
}

// H is the integral of S from x to infinity (the mean for x = 0).
func (d delayDist) H(x float64) float64 {
	if x <= 0 {
		return d.mean() - x
	}
	switch d.fam {
	case famLognormal:
		z := (math.Log(x) - d.a) / d.b
		return max(0, math.Exp(d.a+d.b*d.b/2)*upper(z-d.b)-x*upper(z))
	case famTwoExp:
		return d.w*d.a*math.Exp(-x/d.a) + (1-d.w)*d.b*math.Exp(-x/d.b)
	}
	return d.a * math.Exp(-x/d.a)
}

// mean is the mean delay.
func (d delayDist) mean() float64 {
	switch d.fam {
	case famLognormal:
		return math.Exp(d.a + d.b*d.b/2)
	case famTwoExp:
		return d.w*d.a + (1-d.w)*d.b
	}
	return d.a
}

// cohortMass is the share of a cohort's keys (arrivals uniform over a
// span s) that get their duplicate at cohort age in [a1, a2): the integral
// of (S(a-s) - S(a))/s.
func (d delayDist) cohortMass(a1, a2, s float64) float64 {
	return max(0, (d.between(a1-s, a2-s)-d.between(a1, a2))/s)
}

// between is the integral of S over [x1, x2], x1 <= x2, computed without
// the cancellation of H(x1) - H(x2) for long means.
func (d delayDist) between(x1, x2 float64) float64 {
	if x2 <= 0 {
		return x2 - x1
	}
	lead := 0.0
	if x1 < 0 {
		lead, x1 = -x1, 0
	}
	expBetween := func(theta float64) float64 {
		return theta * math.Exp(-x1/theta) * -math.Expm1(-(x2-x1)/theta)
	}
	switch d.fam {
	case famLognormal:
		return lead + max(0, d.H(x1)-d.H(x2))
	case famTwoExp:
		return lead + d.w*expBetween(d.a) + (1-d.w)*expBetween(d.b)
	}
	return lead + expBetween(d.a)
}

// leakShare is the share of duplicates a window w of n generations lets
// through: the mean of S over the retentions [w, w + w/n].
func (d delayDist) leakShare(w, n float64) float64 {
	s := w / n
	return max(0, (d.H(w)-d.H(w+s))/s)
}

// quantile is the delay by which a share q of the duplicates have come.
func (d delayDist) quantile(q float64) float64 {
	lo, hi := 1e-9, 1.0
	for d.S(hi) > 1-q && hi < 1e9 {
		hi *= 2
	}
	for hi/lo > 1+1e-6 {
		mid := math.Sqrt(lo * hi)
		if d.S(mid) > 1-q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// describe says the distribution in words, ages scaled by unit.
func (d delayDist) describe(unit time.Duration) string {
	dur := func(x float64) time.Duration { return time.Duration(x * float64(unit)).Round(100 * time.Millisecond) }
	switch d.fam {
	case famLognormal:
		return fmt.Sprintf("lognormal, median %v, sigma %.2f", dur(math.Exp(d.a)), d.b)
	case famTwoExp:
		return fmt.Sprintf("two exponentials, %.0f%% mean %v + %.0f%% mean %v", 100*d.w, dur(d.a), 100*(1-d.w), dur(d.b))
	}
	return fmt.Sprintf("exponential, mean %v", dur(d.a))
}

// plausible bounds a fit to what the bins can tell: means from a tenth
// of a bin to a hundred times the ages measured, a lognormal's sigma in
// [0.05, 5], a mixture's weights from 0.1% each.
func (d delayDist) plausible(bins []fitBin) bool {
	lo, hi := (bins[0].a2-bins[0].a1)/10, 100*bins[len(bins)-1].a2
	in := func(x float64) bool { return x >= lo && x <= hi }
	switch d.fam {
	case famLognormal:
		return d.b >= 0.05 && d.b <= 5 && in(math.Exp(d.a))
	case famTwoExp:
		return d.w >= 0.001 && d.w <= 0.999 && in(d.a) && in(d.b)
	}
	return in(d.a)
}

// fitBin is one age bin of the histogram: ages [a1, a2) in windows, its
// exposure w (originals, divided by the sample factor where the counts
// are the horizon's sample) and its count y.
type fitBin struct{ a1, a2, w, y float64 }

// delayFit is a fitted model: the distribution, p the duplicates per
// original, the log-likelihood, and the covariance of (log p, x).
type delayFit struct {
	fam  delayFamily
	x    []float64
	dist delayDist
	p    float64
	ll    float64
	score float64 // -ll plus penalty per shape parameter
	cov  *mat.SymDense // nil when the information is not invertible
}

// logLik is the Poisson log-likelihood of the bins under p and dist,
// without the terms that do not depend on them.
func logLik(bins []fitBin, s, p float64, d delayDist) float64 {
	ll := 0.0
	for _, b := range bins {
		mu := p * b.w * d.cohortMass(b.a1, b.a2, s)
		if b.y > 0 {
			ll += b.y * math.Log(max(mu, 1e-300))
		}
		ll -= mu
	}
	return ll
}

// profile is the log-likelihood with p at its maximum for d, and that p.
func profile(bins []fitBin, s float64, d delayDist) (ll, p float64) {
	var y, wm float64
	for _, b := range bins {
		y += b.y
		wm += b.w * d.cohortMass(b.a1, b.a2, s)
	}
	if !(wm > 0) || !(y > 0) {
		return math.Inf(-1), 0
	}
	p = y / wm
	return logLik(bins, s, p, d), p
}

// fitFamily fits family f to the bins from each start, keeping the best.
func fitFamily(bins []fitBin, s float64, f delayFamily, starts [][]float64) (delayFit, bool) {
	best := delayFit{fam: f, ll: math.Inf(-1)}
	obj := func(x []float64) float64 {
		if !f.dist(x).plausible(bins) {
			return math.MaxFloat64 / 4
		}
		ll, _ := profile(bins, s, f.dist(x))
		if math.IsInf(ll, -1) || math.IsNaN(ll) {
			return math.MaxFloat64 / 4
		}
		return -ll
	}
	for _, x0 := range starts {
		res, err := optimize.Minimize(optimize.Problem{Func: obj}, x0,
			&optimize.Settings{Converger: &optimize.FunctionConverge{Absolute: 1e-4, Iterations: 25}, FuncEvaluations: 1000},
			&optimize.NelderMead{})
		if err != nil && res == nil {
			continue
		}
		if ll := -res.F; ll > best.ll {
			best.x = append([]float64(nil), res.X...)
			best.ll = ll
		}
	}
	if best.x == nil || math.IsInf(best.ll, -1) {
		return best, false
	}
	best.dist = f.dist(best.x)
	_, best.p = profile(bins, s, best.dist)
	best.score = penalty*float64(f.dim()) - best.ll
	return best, true
}

// setCov sets the fit's covariance.
func (best *delayFit) setCov(bins []fitBin, s float64) {
	f := best.fam
	// The covariance of (log p, x): the inverse of the observed
	// information, the negative Hessian of the log-likelihood.
	n := f.dim() + 1
	full := func(z []float64) float64 { return logLik(bins, s, math.Exp(z[0]), f.dist(z[1:])) }
	z := append([]float64{math.Log(best.p)}, best.x...)
	h := mat.NewSymDense(n, nil)
	fd.Hessian(h, full, z, nil)
	h.ScaleSym(-1, h)
	var ch mat.Cholesky
	if ch.Factorize(h) {
		cov := mat.NewSymDense(n, nil)
		if ch.InverseTo(cov) == nil {
			best.cov = cov
		}
	}
}

// relErr is the relative standard error of g(p, dist) under the fit's
// covariance (the delta method), or 0 without one.
func (m *delayFit) relErr(g func(p float64, d delayDist) float64) float64 {
	v := g(m.p, m.dist)
	if m.cov == nil || !(v > 0) {
		return 0
	}
	z := append([]float64{math.Log(m.p)}, m.x...)
	grad := fd.Gradient(nil, func(z []float64) float64 { return g(math.Exp(z[0]), m.fam.dist(z[1:])) }, z, nil)
	gv := mat.NewVecDense(len(grad), grad)
	return math.Sqrt(max(0, mat.Inner(gv, m.cov, gv))) / v
}

// penalty is what a shape parameter must gain in log-likelihood to be
// kept: 3.3, a likelihood-ratio test at 1% for one parameter (AIC's 1
// would take a second exponential for noise one time in seven).
const penalty = 3.3

// fitDelays fits each family to the bins and returns the one of least
// score (penalised log-likelihood), and whether it fits them: a Pearson chi-square over groups of bins
// of at least 10 expected duplicates each, each group's variance widened
// by 5% of its expectation (the binning's own approximations, such as
// arrivals taken as uniform within a span), stays under its degrees of
// freedom plus four standard deviations.
func fitDelays(bins []fitBin, s float64) (delayFit, bool) {
	exp, ok := fitFamily(bins, s, famExponential, [][]float64{{math.Log(0.3)}})
	if !ok {
		return exp, false
	}
	best := exp
	t := exp.dist.a
	if ln, ok := fitFamily(bins, s, famLognormal, [][]float64{
		{math.Log(t) - 0.5, 0}, {math.Log(t) - 1, math.Log(2)}}); ok && ln.score < best.score {
		best = ln
	}
	if two, ok := fitFamily(bins, s, famTwoExp, [][]float64{
		{1, math.Log(t / 5), math.Log(3 * t)}, {2, math.Log(t / 20), math.Log(5 * t)}}); ok && two.score < best.score {
		best = two
	}
	best.setCov(bins, s)
	return best, best.fits(bins, s)
}

// fits is the goodness-of-fit check fitDelays describes.
func (m *delayFit) fits(bins []fitBin, s float64) bool {
	var chi2 float64
	groups := 0
	var o, e float64
	flush := func() {
		chi2 += (o - e) * (o - e) / (e + 0.0025*e*e)
		groups++
		o, e = 0, 0
	}
	for _, b := range bins {
		o += b.y
		e += m.p * b.w * m.dist.cohortMass(b.a1, b.a2, s)
		if e >= 10 {
			flush()
		}
	}
	if e > 0 {
		flush()
	}
	df := float64(groups - m.fam.dim() - 2)
	if df < 1 {
		return true // too few duplicates to tell
	}
	return chi2 <= df+4*math.Sqrt(2*df)
}
