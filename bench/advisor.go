package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/streamdedup/dedup"
)

// The advisor check: streams whose redelivery delays follow a known
// distribution go through the real engine, on event time, and the
// engine's own estimate of the duplicates its window lets through
// (dedup.Stats.WindowAdvice) is compared with the truth: the
// distribution's closed form for the engine's retention, and the leaks
// counted in the run itself.

// The delay distributions AdvisorConfig.Delay names.
const (
	// AdvisorExponential: exponential delays of mean Mean (the window
	// model's).
	AdvisorExponential = "exponential"
	// AdvisorLognormal: lognormal delays of mean Mean and shape Sigma.
	AdvisorLognormal = "lognormal"
	// AdvisorMixture: 80% exponential of mean Mean/12, 20% of mean
	// 5*Mean (10 s and 10 min at the default Mean of 2 min).
	AdvisorMixture = "mixture"
)

// AdvisorConfig shapes an advisor check.
type AdvisorConfig struct {
	// Seed makes the stream deterministic. Default 1.
	Seed uint64
	// Rate is arrivals per second of virtual time, duplicates included.
	// Default 2000.
	Rate float64
	// DuplicateFraction is the share of arrivals that are duplicates.
	// Default 0.02.
	DuplicateFraction float64
	// Delay is AdvisorExponential, AdvisorLognormal or AdvisorMixture.
	// Default AdvisorExponential.
	Delay string
	// Mean is the mean delay of the exponential and lognormal kinds, and
	// sets the mixture's humps (Mean/12 and 5*Mean). Default 2m.
	Mean time.Duration
	// Sigma is the lognormal's shape. Default 1.
	Sigma float64
	// Windows are the engine windows checked, one engine each on the same
	// stream. Default 5m.
	Windows []time.Duration
	// Generations is the engines' Generations. Default 4.
	Generations int
	// Duration is the virtual length of the stream. Default 40m.
	Duration time.Duration
	// Checkpoints is how many times along the stream the estimates are
	// recorded (AdvisorRun.Trace). Default 20.
	Checkpoints int
	// Probabilistic runs the engines without the exact store.
	Probabilistic bool
	// HorizonSample and HorizonBytes are the engines' Options.HorizonSample
	// and HorizonBytes. Default 0 (the engine's).
	HorizonSample int
	HorizonBytes  int64
}

// EnsureDefaults fills the zero fields of c with their defaults: the
// one place they are defined (dedupbench takes its flags' defaults
// from it).
func (c *AdvisorConfig) EnsureDefaults() {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Rate == 0 {
		c.Rate = 2000
	}
	if c.DuplicateFraction == 0 {
		c.DuplicateFraction = 0.02
	}
	if c.Delay == "" {
		c.Delay = AdvisorExponential
	}
	if c.Mean == 0 {
		c.Mean = 2 * time.Minute
	}
	if c.Sigma == 0 {
		c.Sigma = 1
	}
	if len(c.Windows) == 0 {
		c.Windows = []time.Duration{5 * time.Minute}
	}
	if c.Generations == 0 {
		c.Generations = 4
	}
	if c.Duration == 0 {
		c.Duration = 40 * time.Minute
	}
	if c.Checkpoints == 0 {
		c.Checkpoints = 20
	}
}

func (c *AdvisorConfig) validate() error {
	var errs []error
	if !(c.Rate > 0) {
		errs = append(errs, fmt.Errorf("bench: advisor Rate must be positive, got %v", c.Rate))
	}
	if !(c.DuplicateFraction > 0 && c.DuplicateFraction < 0.5) {
		errs = append(errs, fmt.Errorf("bench: advisor DuplicateFraction must be in (0, 0.5), got %v", c.DuplicateFraction))
	}
	switch c.Delay {
	case AdvisorExponential, AdvisorLognormal, AdvisorMixture:
	default:
		errs = append(errs, fmt.Errorf("bench: advisor Delay must be %s, %s or %s, got %q", AdvisorExponential, AdvisorLognormal, AdvisorMixture, c.Delay))
	}
	if c.Mean <= 0 || !(c.Sigma > 0) || c.Duration <= 0 || c.Generations < 1 || c.Checkpoints < 1 {
		errs = append(errs, fmt.Errorf("bench: advisor Mean, Sigma, Duration, Generations and Checkpoints must be positive"))
	}
	for _, w := range c.Windows {
		if w <= 0 {
			errs = append(errs, fmt.Errorf("bench: advisor window must be positive, got %v", w))
		}
	}
	return errors.Join(errs...)
}

// survival returns P(delay > t) of the configured distribution.
func (c *AdvisorConfig) survival(t time.Duration) float64 {
	x := t.Seconds()
	m := c.Mean.Seconds()
	switch c.Delay {
	case AdvisorLognormal:
		mu := math.Log(m) - c.Sigma*c.Sigma/2
		if x <= 0 {
			return 1
		}
		return 0.5 * math.Erfc((math.Log(x)-mu)/(c.Sigma*math.Sqrt2))
	case AdvisorMixture:
		return 0.8*math.Exp(-x/(m/12)) + 0.2*math.Exp(-x/(5*m))
	}
	return math.Exp(-x / m)
}

// draw returns a delay from the configured distribution.
func (c *AdvisorConfig) draw(r *rand.Rand) time.Duration {
	m := c.Mean.Seconds()
	var s float64
	switch c.Delay {
	case AdvisorLognormal:
		mu := math.Log(m) - c.Sigma*c.Sigma/2
		s = math.Exp(mu + c.Sigma*r.NormFloat64())
	case AdvisorMixture:
		if r.Float64() < 0.8 {
			s = m / 12 * r.ExpFloat64()
		} else {
			s = 5 * m * r.ExpFloat64()
		}
	default:
		s = m * r.ExpFloat64()
	}
	return time.Duration(s * float64(time.Second))
}

// ModelLeaksPerMillion is the truth the advisor is checked against: the
// duplicates per million arrivals that an engine of window w and gens
// generations lets through. A key is kept from W to W + W/gens after its
// arrival, uniformly over arrivals, so the leaks are d times the mean of
// P(delay > T) over T in [W, W + W/gens].
func (c *AdvisorConfig) ModelLeaksPerMillion(w time.Duration, gens int) float64 {
	const steps = 256
	sum := 0.0
	for i := range steps {
		t := float64(w) * (1 + (float64(i)+0.5)/steps/float64(gens))
		sum += c.survival(time.Duration(t))
	}
	return 1e6 * c.DuplicateFraction * sum / steps
}

// ModelWindowFor is the smallest window (gens generations) whose
// ModelLeaksPerMillion is at most target, to 0.1%.
func (c *AdvisorConfig) ModelWindowFor(target float64, gens int) time.Duration {
	lo, hi := float64(time.Millisecond), float64(1000*time.Hour)
	if c.ModelLeaksPerMillion(time.Duration(hi), gens) > target {
		return 0
	}
	for hi/lo > 1.001 {
		mid := math.Sqrt(lo * hi)
		if c.ModelLeaksPerMillion(time.Duration(mid), gens) > target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Duration(hi)
}

// AdvisorPoint is one engine's estimate at a point of the stream.
type AdvisorPoint struct {
	At              time.Duration `json:"at"`
	Duplicates      uint64        `json:"duplicates"` // true duplicates so far
	Caught          uint64        `json:"caught"`
	LeaksPerMillion float64       `json:"leaks_per_million"`
	LeaksRelErr     float64       `json:"leaks_rel_err"`
	WindowFor100    time.Duration `json:"window_for_100"`
}

// AdvisorRun is one engine's check.
type AdvisorRun struct {
	Window time.Duration `json:"window"`
	// Advice is the engine's final estimate; FilterBytes the engine's
	// filter memory then, beside Advice.Bytes.
	Advice      dedup.WindowAdvice `json:"advice"`
	FilterBytes uint64             `json:"filter_bytes"`
	// ModelLeaksPerMillion is the truth (closed form);
	// MeasuredLeaksPerMillion the duplicates the engine answered New per
	// million arrivals, counted from Window + span on (it misses the
	// duplicates the stream's end cuts off, so it runs low for long
	// delays).
	ModelLeaksPerMillion    float64 `json:"model_leaks_per_million"`
	MeasuredLeaksPerMillion float64 `json:"measured_leaks_per_million"`
	// ModelWindowFor100, 10, 1: the truth for Advice.WindowFor100, 10, 1.
	ModelWindowFor100, ModelWindowFor10, ModelWindowFor1 time.Duration
	// Trace is the estimate along the stream.
	Trace []AdvisorPoint `json:"trace"`
	// Within20At is the number of true duplicates after which the
	// estimate of leaks stays within 20% of the model; 0 if it never
	// settles.
	Within20At uint64 `json:"within20_at"`
}

// AdvisorResult is an advisor check's outcome.
type AdvisorResult struct {
	Config AdvisorConfig `json:"config"`
	Runs   []AdvisorRun  `json:"runs"`
	Events uint64        `json:"events"`
	// Machine says where and when the check was made.
	Machine *Machine `json:"machine,omitempty"`
}

// advisorEpoch is the virtual clock's start.
var advisorEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Advisor runs the check: one stream, one engine per window on event time,
// commits every Window/16 of virtual time.
func Advisor(ctx context.Context, cfg AdvisorConfig) (*AdvisorResult, error) {
	cfg.EnsureDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res := &AdvisorResult{Config: cfg, Machine: StartMachine()}
	defer res.Machine.End()
	engines := make([]*dedup.Engine, len(cfg.Windows))
	defer func() {
		for _, e := range engines {
			if e != nil {
				_ = e.Close()
			}
		}
	}()
	minW := cfg.Windows[0]
	for i, w := range cfg.Windows {
		e, err := cfg.openEngine(w)
		if err != nil {
			return nil, err
		}
		engines[i] = e
		minW = min(minW, w)
		res.Runs = append(res.Runs, cfg.newRun(w))
	}
	arr := newAdvisorArrivals(&cfg)
	tick := min(max(minW/2000, time.Millisecond), time.Second)
	commitEvery := max(minW/16, 10*time.Millisecond)
	keys := make([][]byte, 0, 512)
	isDup := make([]bool, 0, 512)
	verdicts := make([][]dedup.Verdict, len(engines))
	leaked := make([]uint64, len(engines))
	var arrivals, dups uint64
	var batchAt, lastCommit time.Duration
	checkEvery := cfg.Duration / time.Duration(cfg.Checkpoints)
	nextCheck := checkEvery
	measureFrom := cfg.measureFrom()
	arrivalsFrom := make([]uint64, len(engines))
	parallel := func(fn func(i int) error) error { return parallelN(len(engines), fn) }
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		at := advisorEpoch.Add(batchAt)
		err := parallel(func(i int) error {
			v := verdicts[i]
			if cap(v) < len(keys) {
				v = make([]dedup.Verdict, 512)
			}
			v = v[:len(keys)]
			verdicts[i] = v
			if err := engines[i].ObserveBatchAt(keys, at, v); err != nil {
				return err
			}
			if batchAt >= measureFrom[i] {
				leaked[i] += countLeaks(isDup, v)
			}
			return nil
		})
		keys, isDup = keys[:0], isDup[:0]
		return err
	}
	for {
		at, key, dup := arr.next()
		if at >= cfg.Duration {
			break
		}
		if arrivals&4095 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("bench: advisor: %w", ctx.Err())
		}
		if len(keys) > 0 && (at-batchAt >= tick || len(keys) == cap(keys)) {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		if at-lastCommit >= commitEvery {
			if err := flush(); err != nil {
				return nil, err
			}
			if err := parallel(func(i int) error { return engines[i].Commit(nil) }); err != nil {
				return nil, err
			}
			lastCommit = at
		}
		if at >= nextCheck {
			if err := flush(); err != nil {
				return nil, err
			}
			for i, e := range engines {
				res.Runs[i].trace(at, dups, e.Stats().WindowAdvice)
			}
			nextCheck += checkEvery
		}
		if len(keys) == 0 {
			batchAt = at
		}
		keys = append(keys, advisorKey(key))
		isDup = append(isDup, dup)
		arrivals++
		if dup {
			dups++
		}
		for i := range engines {
			if at >= measureFrom[i] {
				arrivalsFrom[i]++
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := parallel(func(i int) error { return engines[i].Commit(nil) }); err != nil {
		return nil, err
	}
	res.Events = arrivals
	for i, e := range engines {
		res.Runs[i].finish(cfg.Duration, dups, e.Stats(), leaked[i], arrivalsFrom[i])
	}
	return res, nil
}

// AdvisorFigure is the spread of one figure of the advice over the runs
// of an AdvisorSpread: the relative errors against the truth (estimate /
// truth - 1; an estimate of 0, not known, counts as -1).
type AdvisorFigure struct {
	Name string `json:"name"`
	// Min and Max bound the relative errors, RMS is their root mean
	// square, Within20 the share of runs within 20%.
	Min, Max, RMS, Within20 float64
}

// AdvisorSpread is the advice's accuracy for one delay distribution over
// several stream seeds, each run one engine (a seed and a window).
type AdvisorSpread struct {
	Delay string `json:"delay"`
	// HorizonSample and HorizonBytes are the engines' options (0: the
	// engine's default); SampleMin and SampleMax bound the sample the
	// runs ended at (WindowAdvice.Sample).
	HorizonSample        int
	HorizonBytes         int64
	SampleMin, SampleMax uint64
	// Seeds and Runs count the streams and the engine runs.
	Seeds, Runs int
	// DuplicatesMin and DuplicatesMax bound WindowAdvice.Duplicates.
	DuplicatesMin, DuplicatesMax uint64
	// Figures: the leaks of the current window, then the windows for 100,
	// 10 and 1 per million.
	Figures []AdvisorFigure `json:"figures"`
	// AllWithin20 is the share of runs with every figure within 20%.
	AllWithin20 float64
	// StatedRelErrMedian is the median LeaksRelErr the engine stated;
	// Within2SE the share of runs whose true leaks lie within two stated
	// standard errors of the estimate (about 95% if LeaksRelErr is honest).
	StatedRelErrMedian, Within2SE float64
}

// SpreadAdvisor summarises advisor checks by delay distribution and
// horizon options, in the order they first appear.
func SpreadAdvisor(results []*AdvisorResult) []AdvisorSpread {
	var out []AdvisorSpread
	type key struct {
		delay  string
		sample int
		bytes  int64
	}
	index := map[key]int{}
	type acc struct {
		errs    [4][]float64
		all, se int
		stated  []float64
	}
	var accs []*acc
	for _, res := range results {
		c := res.Config
		k := key{c.Delay, c.HorizonSample, c.HorizonBytes}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, AdvisorSpread{Delay: c.Delay, HorizonSample: c.HorizonSample, HorizonBytes: c.HorizonBytes,
				DuplicatesMin: math.MaxUint64, SampleMin: math.MaxUint64})
			accs = append(accs, &acc{})
		}
		s, a := &out[i], accs[i]
		s.Seeds++
		for _, r := range res.Runs {
			adv := r.Advice
			s.Runs++
			s.DuplicatesMin = min(s.DuplicatesMin, adv.Duplicates)
			s.DuplicatesMax = max(s.DuplicatesMax, adv.Duplicates)
			s.SampleMin = min(s.SampleMin, adv.Sample)
			s.SampleMax = max(s.SampleMax, adv.Sample)
			rel := func(got, want float64) float64 {
				if !(want > 0) {
					return 0
				}
				return got/want - 1
			}
			errs := [4]float64{rel(adv.LeaksPerMillion, r.ModelLeaksPerMillion),
				rel(adv.WindowFor100.Seconds(), r.ModelWindowFor100.Seconds()),
				rel(adv.WindowFor10.Seconds(), r.ModelWindowFor10.Seconds()),
				rel(adv.WindowFor1.Seconds(), r.ModelWindowFor1.Seconds())}
			all := true
			for k, e := range errs {
				a.errs[k] = append(a.errs[k], e)
				all = all && math.Abs(e) <= 0.2
			}
			if all {
				a.all++
			}
			if math.Abs(adv.LeaksPerMillion-r.ModelLeaksPerMillion) <= 2*adv.LeaksRelErr*adv.LeaksPerMillion {
				a.se++
			}
			a.stated = append(a.stated, adv.LeaksRelErr)
		}
	}
	for i := range out {
		s, a := &out[i], accs[i]
		if s.Runs == 0 {
			s.DuplicatesMin, s.SampleMin = 0, 0
			continue
		}
		n := float64(s.Runs)
		for k, name := range []string{"leaks", "window for 100/M", "window for 10/M", "window for 1/M"} {
			f := AdvisorFigure{Name: name, Min: math.Inf(1), Max: math.Inf(-1)}
			in := 0
			for _, e := range a.errs[k] {
				f.Min, f.Max = min(f.Min, e), max(f.Max, e)
				f.RMS += e * e
				if math.Abs(e) <= 0.2 {
					in++
				}
			}
			f.RMS = math.Sqrt(f.RMS / n)
			f.Within20 = float64(in) / n
			s.Figures = append(s.Figures, f)
		}
		s.AllWithin20 = float64(a.all) / n
		s.Within2SE = float64(a.se) / n
		slices.Sort(a.stated)
		s.StatedRelErrMedian = a.stated[len(a.stated)/2]
	}
	return out
}
