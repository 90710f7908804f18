package rotate

import (
	"math"

	"github.com/streamdedup/dedup/filter"
)

// Static filters for sealed generations (Kind filter.Fuse).
//
// Only the newest generation takes new keys; once a newer one exists and
// the clock has passed its end, a generation is sealed: its filter is
// rebuilt as a binary fuse filter (filter.BuildFuse) from the journal of
// hashes it kept while it was the newest, and the journal and the mutable
// filter are dropped. A fuse filter holds 1.125*w bits a key for a rate of
// 2^-w, where the blocked filter needs about 1.5*log2(1/p). Hashes a sealed
// generation receives later (commits of keys observed before its end) go
// into its fuse filter's small overflow, so nothing is lost.
//
// The newest generation is a blocked filter keeping a journal (8 bytes a
// key, in memory): it is rebuilt twice as large from the journal when
// full, so it starts small and follows the traffic like the other kinds'
// first generation. A generation restored from a snapshot while it was the
// newest has no journal: it stays a blocked filter until it expires.
//
// The error budget: a new key is tested against the newest generation's
// filter (rate pa) and N sealed ones (2^-w each), so pa and w are chosen
// (fuseSplit) so that 1-(1-pa)(1-2^-w)^N meets the target with the least
// memory at the peak.

// fuseLateShare is the share of a sealed generation's rate given to its
// overflow of late hashes (a small blocked filter, made only if any come).
const fuseLateShare = 1.0 / 16

// fuseSplit returns the fingerprint width of sealed generations and the
// target of the newest generation's filter for a ring target fp over
// generations sealed ones: the pair that meets fp with the fewest bytes a
// key over the window at the peak (generations fuse filters and one
// blocked filter for generations generations' keys).
func fuseSplit(fp float64, generations int) (width int, activeFP float64) {
	const probe = 1 << 20
	best := math.Inf(1)
	width, activeFP = filter.MaxFuseWidth, PerGenerationFP(fp, generations)
	for w := 1; w <= filter.MaxFuseWidth; w++ {
		sealed := math.Ldexp(1, -w) * (1 + fuseLateShare)
		rest := 1 - (1-fp)/math.Pow(1-sealed, float64(generations))
		if !(rest > 0) {
			continue
		}
		active, err := filter.EstimateBytes(filter.Blocked, probe, rest)
		if err != nil {
			continue
		}
		bytes := float64(generations)*float64(filter.FuseBytes(probe, w)) + float64(active)
		if bytes < best {
			best, width, activeFP = bytes, w, rest
		}
	}
	return width, activeFP
}

// fuseState is a Fuse ring's: the split of the target and when the next
// seal is due.
type fuseState struct {
	width    int
	activeFP float64
	lateFP   float64
	// sealAt is the time (ns) from which a generation is due to be sealed;
	// math.MaxInt64 if none is.
	sealAt int64
	// sealErrors counts generations whose fuse filter could not be built
	// (they keep their blocked filter).
	sealErrors int
}

func newFuseState(cfg Config) *fuseState {
	w, a := fuseSplit(cfg.FalsePositiveRate, cfg.Generations)
	return &fuseState{width: w, activeFP: a, lateFP: math.Ldexp(1, -w) * fuseLateShare, sealAt: math.MaxInt64}
}

// FuseWidth returns the fingerprint width of a Fuse ring's sealed
// generations and the target of its newest generation's filter (0, 0 for
// other kinds).
func (r *Ring) FuseWidth() (width int, activeFP float64) {
	if r.fuse == nil {
		return 0, 0
	}
	return r.fuse.width, r.fuse.activeFP
}

// newFuseActive returns the filter of a new generation of a Fuse ring: a
// blocked filter for capacity keys that journals its hashes and, when
// full, is rebuilt twice as large from them.
func (r *Ring) newFuseActive(capacity uint64) (filter.Filter, error) {
	f, err := filter.New(filter.Blocked, capacity, r.fuse.activeFP)
	if err != nil {
		return nil, err
	}
	rg := f.(filter.Regrower)
	grow := func(keys uint64) (uint64, bool) { return 2 * max(keys, rg.(filter.Filter).Capacity()), true }
	if err := rg.StartJournal(grow); err != nil {
		return nil, err
	}
	return f, nil
}

// sealable reports whether g can be sealed: its filter keeps a journal.
func sealable(g *Generation) (filter.Regrower, bool) {
	rg, ok := g.Filter.(filter.Regrower)
	if !ok || !rg.Journaling() {
		return nil, false
	}
	return rg, true
}

// planSeal sets when the next seal is due: the end of the oldest
// journaling generation that is not the newest.
func (r *Ring) planSeal() {
	r.fuse.sealAt = math.MaxInt64
	for _, g := range r.gens[:max(len(r.gens)-1, 0)] {
		if _, ok := sealable(g); ok {
			r.fuse.sealAt = min(r.fuse.sealAt, int64(g.ID+1)*r.span)
		}
	}
}

// sealDue seals every generation due at ns.
func (r *Ring) sealDue(ns int64) {
	for _, g := range r.gens[:max(len(r.gens)-1, 0)] {
		if int64(g.ID+1)*r.span <= ns {
			r.seal(g)
		}
	}
	r.planSeal()
}

// seal replaces g's journaling filter by a fuse filter built from its
// journal. If the build fails, g keeps its blocked filter (no longer
// journaling): more memory, no key lost.
func (r *Ring) seal(g *Generation) {
	rg, ok := sealable(g)
	if !ok {
		return
	}
	f, err := filter.BuildFuse(rg.Journal(), r.fuse.width, r.fuse.lateFP)
	if err != nil {
		rg.StopJournal()
		r.fuse.sealErrors++
		return
	}
	g.Filter = f
}
