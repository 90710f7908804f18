package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// simState is one engine's tally in a pass.
type simState struct {
	spec   simSpec
	target *EngineTarget
	run    SimRun
	dup    []bool
	// keys held samples
	keySum, filterSum float64
	samples           int
	err               error
}

// simPass streams the workload once through one engine per spec, all on
// one virtual clock, and tallies each.
func simPass(ctx context.Context, cfg SimConfig, stream StreamOptions, scale float64, warmup, measure time.Duration,
	specs []simSpec, collect bool, progress Progress) (runs []SimRun, delays []time.Duration, err error) {
	progress = orNop(progress)
	stream.Rate *= scale
	stream.Duration = warmup + measure
	stream.Events = 0
	st, err := NewStream(stream)
	if err != nil {
		return nil, nil, err
	}
	clk := NewVirtualClock(simEpoch)
	states := make([]*simState, len(specs))
	minWindow := specs[0].window
	defer func() {
		for _, s := range states {
			if s != nil && s.target != nil {
				err = errors.Join(err, s.target.Close())
			}
		}
	}()
	for i, sp := range specs {
		if states[i], err = openSimState(cfg, stream, sp, clk); err != nil {
			return nil, nil, err
		}
		minWindow = min(minWindow, sp.window)
	}
	// Clock resolution, commit and sampling intervals, in virtual time.
	tick := min(max(minWindow/2000, time.Millisecond), time.Second)
	commitEvery := min(max(minWindow/16, 10*time.Millisecond), time.Minute)
	sampleEvery := max(measure/40, tick) // Stats is costly: sample sparingly

	const maxBatch = 512
	keys := make([][]byte, 0, maxBatch)
	truth := make([]Event, 0, maxBatch)
	var batchAt, lastCommit time.Duration
	nextSample := warmup
	total := int64(stream.Rate * stream.Duration.Seconds())
	progress.Stage(fmt.Sprintf("simulate %d engine(s), %v virtual", len(specs), stream.Duration), total)
	start := time.Now()

	parallel := func(fn func(s *simState) error) error { return simParallel(states, cfg.Parallel, fn) }
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		err := parallel(func(s *simState) error {
			if cap(s.dup) < len(keys) {
				s.dup = make([]bool, maxBatch)
			}
			dup := s.dup[:len(keys)]
			if err := s.target.Check(keys, time.Time{}, dup); err != nil {
				return err
			}
			s.run.tally(truth, dup, warmup)
			return nil
		})
		if collect {
			for i := range truth {
				if truth[i].Dup && truth[i].At >= warmup {
					delays = append(delays, truth[i].Delay)
				}
			}
		}
		progress.Add(int64(len(keys)))
		keys, truth = keys[:0], truth[:0]
		return err
	}

	var ev Event
	for n := 0; st.Next(&ev); n++ {
		if n&4095 == 0 && ctx.Err() != nil {
			return nil, nil, fmt.Errorf("bench: simulate: %w", ctx.Err())
		}
		if len(keys) > 0 && (ev.At-batchAt >= tick || len(keys) == maxBatch) {
			if err := flush(); err != nil {
				return nil, nil, err
			}
		}
		if ev.At-lastCommit >= commitEvery {
			if err := flush(); err != nil {
				return nil, nil, err
			}
			if err := parallel(func(s *simState) error { return s.target.Commit() }); err != nil {
				return nil, nil, err
			}
			lastCommit = ev.At
		}
		if ev.At >= nextSample {
			if err := flush(); err != nil {
				return nil, nil, err
			}
			for _, s := range states {
				if err := s.sample(); err != nil {
					return nil, nil, err
				}
			}
			nextSample += sampleEvery
		}
		if len(keys) == 0 {
			batchAt = ev.At
			clk.Set(ev.At)
		}
		keys = append(keys, ev.Key)
		truth = append(truth, ev)
	}
	if err := flush(); err != nil {
		return nil, nil, err
	}
	elapsed := time.Since(start)
	for _, s := range states {
		r, err := s.result(cfg, stream, elapsed, measure, scale)
		if err != nil {
			return nil, nil, err
		}
		runs = append(runs, r)
	}
	return runs, delays, nil
}

// openSimState opens the engine of sp on clk for a pass over stream.
func openSimState(cfg SimConfig, stream StreamOptions, sp simSpec, clk *VirtualClock) (*simState, error) {
	ec := sp.engine
	ec.Window = sp.window
	if *cfg.AlignRetention {
		g := ec.Generations
		if g == 0 {
			g = 8
		}
		ec.Window = time.Duration(float64(sp.window) * float64(2*g) / float64(2*g+1))
	}
	ec.ExpectedRate = stream.DistinctRate()
	ec.ManualCommit = true
	ec.AutoCommit = 0
	ec.Dir = ""
	t, err := OpenEngine(ec, clk)
	if err != nil {
		return nil, err
	}
	return &simState{spec: sp, target: t, run: SimRun{
		Label: sp.label, Window: sp.window, EngineWindow: ec.Window,
		Mode: ec.ModeName(), Filter: ec.Filter,
	}}, nil
}

// simParallel runs fn on every state, at most n at a time, and joins
// their errors.
func simParallel(states []*simState, n int, fn func(s *simState) error) error {
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, s := range states {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.err = fn(s)
		}()
	}
	wg.Wait()
	var errs []error
	for _, s := range states {
		errs = append(errs, s.err)
	}
	return errors.Join(errs...)
}

// sample adds the keys and filter bytes s's engine holds now to its
// sums.
func (s *simState) sample() error {
	u, err := s.target.Usage()
	if err != nil {
		return err
	}
	s.keySum += float64(u.Keys)
	s.filterSum += float64(u.FilterBytes)
	s.samples++
	return nil
}

// tally counts the verdicts dup of the events truth after warmup.
func (r *SimRun) tally(truth []Event, dup []bool, warmup time.Duration) {
	for i := range truth {
		ev := &truth[i]
		if ev.At < warmup {
			continue
		}
		r.Requests++
		switch {
		case ev.Dup && dup[i]:
			r.Duplicates++
			r.Suppressed++
		case ev.Dup:
			r.Duplicates++
			r.Leaked++
		case dup[i]:
			r.FalseDrops++
		}
		if ev.Replay {
			r.Replays++
			if !dup[i] {
				r.ReplaysLeaked++
			}
		}
	}
}

// result returns s's run with its rates and shares, of a pass that took
// elapsed and measured measure of virtual time at scale.
func (s *simState) result(cfg SimConfig, stream StreamOptions, elapsed, measure time.Duration, scale float64) (SimRun, error) {
	secs := measure.Seconds()
	r := &s.run
	u, err := s.target.Usage()
	if err != nil {
		return SimRun{}, err
	}
	r.Elapsed = elapsed
	r.RequestsPerSec = float64(r.Requests) / secs / scale
	r.DuplicatesPerSec = float64(r.Duplicates) / secs / scale
	r.SuppressedPerSec = float64(r.Suppressed) / secs / scale
	r.LeakedPerSec = float64(r.Leaked) / secs / scale
	if r.Duplicates > 0 {
		p := float64(r.Suppressed) / float64(r.Duplicates)
		r.ShareSuppressed = p
		r.ShareSE = math.Sqrt(p * (1 - p) / float64(r.Duplicates))
	}
	if r.Replays > 0 {
		r.ReplayShareSuppressed = 1 - float64(r.ReplaysLeaked)/float64(r.Replays)
		if retries := r.Duplicates - r.Replays; retries > 0 {
			r.RetryShareSuppressed = 1 - float64(r.Leaked-r.ReplaysLeaked)/float64(retries)
		}
	}
	if r.Requests > 0 {
		r.LeaksPerMillion = float64(r.Leaked) / float64(r.Requests) * 1e6
		r.LeaksSE = math.Sqrt(float64(r.Leaked)) / float64(r.Requests) * 1e6
		r.FalseDropsPerMillion = float64(r.FalseDrops) / float64(r.Requests) * 1e6
	}
	if s.samples > 0 {
		r.KeysHeld = s.keySum / float64(s.samples) / scale
		r.FilterBytes = s.filterSum / float64(s.samples) / scale
	}
	r.KeysModel = stream.DistinctRate() / scale * s.spec.window.Seconds()
	r.MemoryModel = r.KeysHeld * cfg.BytesPerKey
	r.DiskBytes = float64(u.Disk) / scale
	return *r, nil
}
