package bench

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/streamdedup/dedup"
)

// pending is a scheduled duplicate.
type pending struct {
	at  time.Duration
	key uint64
}

type pendingHeap []pending

func (h pendingHeap) Len() int { return len(h) }

func (h pendingHeap) Less(i, j int) bool { return h[i].at < h[j].at }

func (h pendingHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *pendingHeap) Push(x any) { *h = append(*h, x.(pending)) }

func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// advisorArrivals draws the arrivals of an advisor run: originals arrive
// as a Poisson process at R(1-d); each gets one duplicate with
// probability d/(1-d), after a drawn delay.
type advisorArrivals struct {
	cfg            *AdvisorConfig
	rng            *rand.Rand
	origRate, pDup float64
	pend           pendingHeap
	nextKey        uint64 // the key of the next original
	nextOrig       time.Duration
}

func newAdvisorArrivals(cfg *AdvisorConfig) *advisorArrivals {
	a := &advisorArrivals{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		origRate: cfg.Rate * (1 - cfg.DuplicateFraction),
		pDup:     cfg.DuplicateFraction / (1 - cfg.DuplicateFraction)}
	a.nextOrig = time.Duration(a.rng.ExpFloat64() / a.origRate * float64(time.Second))
	return a
}

// next returns the next arrival: an original or the earliest pending
// duplicate.
func (a *advisorArrivals) next() (at time.Duration, key uint64, dup bool) {
	if a.pend.Len() > 0 && a.pend[0].at < a.nextOrig {
		p := heap.Pop(&a.pend).(pending)
		return p.at, p.key, true
	}
	at, key = a.nextOrig, a.nextKey
	a.nextKey++
	a.nextOrig += time.Duration(a.rng.ExpFloat64() / a.origRate * float64(time.Second))
	if a.rng.Float64() < a.pDup {
		heap.Push(&a.pend, pending{at: at + a.cfg.draw(a.rng), key: key})
	}
	return at, key, false
}

// openEngine opens the engine of the run with window w, on event time.
func (cfg *AdvisorConfig) openEngine(w time.Duration) (*dedup.Engine, error) {
	return dedup.Open(dedup.Options{Window: w, Generations: cfg.Generations, EventTime: true,
		Probabilistic: cfg.Probabilistic, ExpectedRate: cfg.Rate, MaxInFlight: 1 << 24, HorizonSample: cfg.HorizonSample, HorizonBytes: cfg.HorizonBytes})
}

// newRun returns the run of window w with the model's figures.
func (cfg *AdvisorConfig) newRun(w time.Duration) AdvisorRun {
	return AdvisorRun{Window: w,
		ModelLeaksPerMillion: cfg.ModelLeaksPerMillion(w, cfg.Generations),
		ModelWindowFor100:    cfg.ModelWindowFor(100, cfg.Generations),
		ModelWindowFor10:     cfg.ModelWindowFor(10, cfg.Generations),
		ModelWindowFor1:      cfg.ModelWindowFor(1, cfg.Generations)}
}

// parallelN runs fn(0) to fn(n-1) at once and joins their errors.
func parallelN(n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn(i) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// countLeaks returns how many of the duplicates (isDup) the verdicts v
// let through as New.
func countLeaks(isDup []bool, v []dedup.Verdict) uint64 {
	var n uint64
	for k, d := range isDup {
		if d && v[k] == dedup.New {
			n++
		}
	}
	return n
}

// measureFrom returns, per window, when its leaks start to count: once
// the window and a generation have passed (the filters are full).
func (cfg *AdvisorConfig) measureFrom() []time.Duration {
	m := make([]time.Duration, len(cfg.Windows))
	for i, w := range cfg.Windows {
		m[i] = w + w/time.Duration(cfg.Generations)
	}
	return m
}

// advisorKey returns the key of arrival key: "ev" and 10 bytes of its
// mixed number.
func advisorKey(key uint64) []byte {
	k := make([]byte, 12)
	copy(k, "ev")
	binary.BigEndian.PutUint64(k[2:], key*0x9e3779b97f4a7c15)
	return k
}

// trace appends the advice a at virtual time at, after dups duplicates.
func (r *AdvisorRun) trace(at time.Duration, dups uint64, a dedup.WindowAdvice) {
	r.Trace = append(r.Trace, AdvisorPoint{At: at, Duplicates: dups, Caught: a.Caught,
		LeaksPerMillion: a.LeaksPerMillion, LeaksRelErr: a.LeaksRelErr, WindowFor100: a.WindowFor100})
}

// finish fills r from its engine's final Stats st, at the end of a run of
// duration d with dups duplicates, and from the leaks measured among its
// arrivals after its warm-up; it finds where the estimate came within 20%
// of the model for good.
func (r *AdvisorRun) finish(d time.Duration, dups uint64, st dedup.Stats, leaked, arrivals uint64) {
	r.Advice, r.FilterBytes = st.WindowAdvice, st.FilterBytes
	if arrivals > 0 {
		r.MeasuredLeaksPerMillion = 1e6 * float64(leaked) / float64(arrivals)
	}
	r.trace(d, dups, r.Advice)
	for k := len(r.Trace) - 1; k >= 0; k-- {
		p := r.Trace[k]
		if math.Abs(p.LeaksPerMillion-r.ModelLeaksPerMillion) > 0.2*r.ModelLeaksPerMillion {
			break
		}
		r.Within20At = p.Duplicates
	}
}
