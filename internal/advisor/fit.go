package advisor

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

// plausible bounds a fit to what the histogram can tell: means from a
// tenth of a bin to a hundred times the ages measured, a lognormal's
// sigma in [0.05, 5], a mixture's weights from 0.1% each.
func (d delayDist) plausible(h *histogram) bool {
	lo, hi := h.width/10, 100*h.width*float64(len(h.y))
	in := func(x float64) bool { return x >= lo && x <= hi }
	switch d.fam {
	case famLognormal:
		return d.b >= 0.05 && d.b <= 5 && in(math.Exp(d.a))
	case famTwoExp:
		return d.w >= 0.001 && d.w <= 0.999 && in(d.a) && in(d.b)
	}
	return in(d.a)
}

// histogram is the advisor's age histogram as the fit sees it: bin j
// covers cohort ages [j, j+1)*width (in windows), a span is k bins; w[j]
// is its exposure (originals, divided by the sample factor where the
// counts are the horizon's sample), y[j] its count and g[j] the false
// matches expected among them (nil: none). A bin's count is Poisson of
// mean p w[j] mass[j] + g[j]: the false matches are a known background,
// not subtracted, so a few of them at ages no delay reaches read as the
// noise they are, not as a tail.
type histogram struct {
	width   float64
	k       int
	w, y, g []float64
	hs      []float64 // scratch: H at the bin edges from -k
	ms      []float64 // scratch: the bins' masses
}

// span is a generation's span in windows.
func (h *histogram) span() float64 { return float64(h.k) * h.width }

// masses returns each bin's share of a cohort's keys whose duplicate
// comes at a cohort age in it under d: the integral over the bin of
// (S(a-s) - S(a))/s, from H at the bin edges (an edge shifted by a span is
// an edge too). The slice is scratch, valid until the next call.
func (h *histogram) masses(d delayDist) []float64 {
	n := len(h.y)
	if cap(h.hs) < n+1+h.k {
		h.hs = make([]float64, n+1+h.k)
		h.ms = make([]float64, n)
	}
	hs := h.hs[:n+1+h.k] // hs[i] is H((i-k)*width)
	for i := h.k; i < len(hs); i++ {
		hs[i] = d.H(float64(i-h.k) * h.width)
	}
	s := h.span()
	ms := h.ms[:n]
	for j := range ms {
		// Edges j-k and j-k+1 (shifted by a span) are below zero or at it,
		// where the integral of S is the bin's width.
		lead := h.width
		if j >= h.k {
			lead = hs[j] - hs[j+1]
		}
		ms[j] = max(0, (lead-(hs[j+h.k]-hs[j+h.k+1]))/s)
	}
	return ms
}

// delayFit is a fitted model: the distribution, p the duplicates per
// original, the log-likelihood, and the covariance of (log p, x).
type delayFit struct {
	fam   delayFamily
	x     []float64
	dist  delayDist
	p     float64
	ll    float64
	score float64       // -ll plus penalty per shape parameter
	cov   *mat.SymDense // nil when the information is not invertible
}

// mu is bin j's expected count under p and the bin's mass m.
func (h *histogram) mu(j int, p, m float64) float64 {
	mu := p * h.w[j] * m
	if h.g != nil {
		mu += h.g[j]
	}
	return mu
}

// logLik is the Poisson log-likelihood of the histogram under p and d,
// without the terms that do not depend on them.
func (h *histogram) logLik(p float64, d delayDist) float64 {
	return h.logLikMasses(p, h.masses(d))
}

func (h *histogram) logLikMasses(p float64, ms []float64) float64 {
	ll := 0.0
	for j, m := range ms {
		mu := h.mu(j, p, m)
		if h.y[j] > 0 {
			ll += h.y[j] * math.Log(max(mu, 1e-300))
		}
		ll -= mu
	}
	return ll
}

// profile is the log-likelihood with p at its maximum for d, and that p.
func (h *histogram) profile(d delayDist) (ll, p float64) {
	var y, a float64
	ms := h.masses(d)
	for j, m := range ms {
		y += h.y[j]
		a += h.w[j] * m
	}
	if !(a > 0) || !(y > 0) {
		return math.Inf(-1), 0
	}
	// Without false matches the maximum is y/a; with them it is below.
	p = y / a
	if h.g != nil {
		p = h.maxP(ms, p, a)
	}
	return h.logLikMasses(p, ms), p
}

// maxP is the p that maximises the log-likelihood with the false matches
// g, the root of the score s(p) = sum y a/(p a + g) - sum a (a = w mass).
// s is decreasing and convex in p, and s(y/a) <= 0: Newton's first step
// from hi lands at or below the root and the next ones climb to it.
func (h *histogram) maxP(ms []float64, hi, sumA float64) float64 {
	p := hi
	for range 60 {
		var s, ds float64
		for j, m := range ms {
			a := h.w[j] * m
			if h.y[j] == 0 || a == 0 {
				continue
			}
			den := p*a + h.g[j]
			s += h.y[j] * a / den
			ds -= h.y[j] * a * a / (den * den)
		}
		s -= sumA
		if !(ds < 0) {
			break
		}
		next := p - s/ds
		if next <= 0 {
			next = p / 16 // the root is near zero: the false matches explain the counts
		}
		if math.Abs(next-p) <= 1e-10*p {
			return next
		}
		p = next
	}
	return p
}

// fitFamily fits family f to the bins from each start, keeping the best.
func fitFamily(h *histogram, f delayFamily, starts [][]float64) (delayFit, bool) {
	best := delayFit{fam: f, ll: math.Inf(-1)}
	obj := func(x []float64) float64 {
		if !f.dist(x).plausible(h) {
			return math.MaxFloat64 / 4
		}
		ll, _ := h.profile(f.dist(x))
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
	_, best.p = h.profile(best.dist)
	best.score = penalty*float64(f.dim()) - best.ll
	return best, true
}

// setCov sets the fit's covariance.
func (best *delayFit) setCov(h *histogram) {
	f := best.fam
	// The covariance of (log p, x): the inverse of the observed
	// information, the negative Hessian of the log-likelihood.
	n := f.dim() + 1
	full := func(z []float64) float64 { return h.logLik(math.Exp(z[0]), f.dist(z[1:])) }
	z := append([]float64{math.Log(best.p)}, best.x...)
	info := mat.NewSymDense(n, nil)
	fd.Hessian(info, full, z, nil)
	info.ScaleSym(-1, info)
	var ch mat.Cholesky
	if ch.Factorize(info) {
		cov := mat.NewSymDense(n, nil)
		if ch.InverseTo(cov) == nil {
			best.cov = cov
		}
	}
}

// relErr is the relative standard error of g(p, dist) under the fit's
// covariance (the delta method); 1 when the information is singular (the
// histogram does not pin the parameters down), 0 when g is 0.
func (m *delayFit) relErr(g func(p float64, d delayDist) float64) float64 {
	v := g(m.p, m.dist)
	if !(v > 0) {
		return 0
	}
	if m.cov == nil {
		return 1
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
func fitDelays(h *histogram) (delayFit, bool) {
	exp, ok := fitFamily(h, famExponential, [][]float64{{math.Log(0.3)}})
	if !ok {
		return exp, false
	}
	best := exp
	t := exp.dist.a
	if ln, ok := fitFamily(h, famLognormal, [][]float64{
		{math.Log(t) - 0.5, 0}, {math.Log(t) - 1, math.Log(2)}}); ok && ln.score < best.score {
		best = ln
	}
	if two, ok := fitFamily(h, famTwoExp, [][]float64{
		{1, math.Log(t / 5), math.Log(3 * t)}, {2, math.Log(t / 20), math.Log(5 * t)}}); ok && two.score < best.score {
		best = two
	}
	best.setCov(h)
	return best, best.fits(h)
}

// fits is the goodness-of-fit check fitDelays describes.
func (m *delayFit) fits(h *histogram) bool {
	var chi2 float64
	groups := 0
	var o, e float64
	flush := func() {
		chi2 += (o - e) * (o - e) / (e + 0.0025*e*e)
		groups++
		o, e = 0, 0
	}
	for j, ms := range h.masses(m.dist) {
		o += h.y[j]
		e += h.mu(j, m.p, ms)
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
