package rotate

import (
	"fmt"
	"math"
	"sync"

	"github.com/streamdedup/dedup/filter"
)

// Static filters for sealed generations (Kind filter.Fuse).
//
// Only the newest generation takes new keys; once a newer one exists and
// the clock has passed its end, a generation is sealed: its filter is
// rebuilt as a binary fuse filter (filter.BuildFuse) from the spool of
// hashes it kept while it was the newest (a Spool: memory, or a file of the
// state directory), and the spool and the blocked filter are dropped. A
// fuse filter holds 1.125*w bits a key for a rate of 2^-w, where a blocked
// filter needs about 1.5*log2(1/p). Hashes a sealed generation receives
// later (commits of keys observed before its end) go into its fuse
// filter's small overflow, so nothing is lost.
//
// The newest generation is a blocked filter that spools its hashes (see
// spooled): rebuilt twice as large from the spool when full, it starts
// small and follows the traffic like the other kinds' first generation. A
// generation restored from a snapshot while it was the newest has no
// spool: it stays a blocked filter until it expires.
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
// blocked filter for generations generations' keys). Width 0: no pair
// meets fp.
func fuseSplit(fp float64, generations int) (width int, activeFP float64) {
	const probe = 1 << 20
	best := math.Inf(1)
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

// FuseFits reports, as an error naming Generations, whether a Fuse ring of
// generations generations can meet the target fp: its sealed generations'
// fuse filters, 2^-16 each at the widest, must leave part of it to the
// newest one.
func FuseFits(fp float64, generations int) error {
	if w, _ := cachedFuseSplit(fp, generations); w == 0 {
		return fmt.Errorf("rotate: Generations %d is too many for Kind fuse at FalsePositiveRate %g: %d sealed generations at 2^-%d each take the whole target", generations, fp, generations, filter.MaxFuseWidth)
	}
	return nil
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
	// seals and sealErrors count generations sealed, and those whose fuse
	// filter could not be built (they keep their blocked filter).
	seals, sealErrors int
}

// fuseSplits memoizes fuseSplit (a few milliseconds per width): every
// shard's ring asks for the same split.
var fuseSplits sync.Map // [fp, generations] -> [2]float64

func cachedFuseSplit(fp float64, generations int) (int, float64) {
	key := [2]float64{fp, float64(generations)}
	v, ok := fuseSplits.Load(key)
	if !ok {
		w, a := fuseSplit(fp, generations)
		v, _ = fuseSplits.LoadOrStore(key, [2]float64{float64(w), a})
	}
	return int(v.([2]float64)[0]), v.([2]float64)[1]
}

func newFuseState(cfg Options) *fuseState {
	w, a := cachedFuseSplit(cfg.FalsePositiveRate, cfg.Generations)
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

// Spool keeps the hashes of a Fuse ring's newest generation until it is
// sealed: in memory by default, in a file when the ring's owner gives
// Options.NewSpool (dedup does when it has a state directory). A Spool is
// used under the ring's lock only.
type Spool interface {
	// Append adds h. An error stops the spool: its generation will not be
	// sealed (it keeps its blocked filter).
	Append(h uint64) error
	// Hashes returns every hash appended, in a slice the caller owns.
	Hashes() ([]uint64, error)
	// MemoryBytes returns the memory the spool holds.
	MemoryBytes() uint64
	// Close discards the spool and what it holds.
	Close() error
}

// memSpool is the default Spool: a slice, 8 bytes a hash (up to 16 while
// it doubles).
type memSpool struct{ hs []uint64 }

func (m *memSpool) Append(h uint64) error     { m.hs = append(m.hs, h); return nil }
func (m *memSpool) Hashes() ([]uint64, error) { return m.hs, nil }
func (m *memSpool) MemoryBytes() uint64       { return 8 * uint64(cap(m.hs)) }
func (m *memSpool) Close() error              { m.hs = nil; return nil }

// spooled is the newest generation's filter in a Fuse ring: a blocked
// filter at the newest generation's target, and the spool of every hash
// given to it. When the blocked filter is full it is rebuilt twice as large
// from the spool (one filter at its full target, like a young generation),
// so a generation starts small and follows the traffic. Encoded, it is its
// blocked filter: a generation restored from it keeps that filter.
type spooled struct {
	filter.Filter
	sp Spool
	fp float64
	// failed is the ring's count of seal failures: a spool that fails
	// counts one there when it fails (its generation will not be sealed).
	failed *int
}

// TestOrAdd implements filter.Filter: h is spooled, then added.
func (s *spooled) TestOrAdd(h uint64) bool {
	if s.sp == nil {
		return s.Filter.TestOrAdd(h)
	}
	was := s.Filter.Test(h)
	if err := s.sp.Append(h); err != nil {
		s.fail()
		return s.Filter.TestOrAdd(h)
	}
	if was {
		return true
	}
	if c := s.Filter.Capacity(); s.Filter.Count() >= c {
		if s.regrow(2*c) == nil {
			return false // the rebuilt filter holds h: it was spooled
		}
	}
	s.Filter.Add(h)
	return false
}

// Add implements filter.Filter.
func (s *spooled) Add(h uint64) { s.TestOrAdd(h) }

// Prefetch implements filter.Prefetcher.
func (s *spooled) Prefetch(h uint64) {
	if pf, ok := s.Filter.(filter.Prefetcher); ok {
		pf.Prefetch(h)
	}
}

// regrow rebuilds the blocked filter for capacity keys from the spool. On
// an error the spool is stopped and the filter chains as usual.
func (s *spooled) regrow(capacity uint64) error {
	hs, err := s.sp.Hashes()
	if err == nil {
		var f filter.Filter
		if f, err = filter.New(filter.Blocked, max(capacity, uint64(len(hs))), s.fp); err == nil {
			pf := f.(filter.Prefetcher)
			for i, h := range hs {
				if i+8 < len(hs) {
					pf.Prefetch(hs[i+8])
				}
				f.Add(h)
			}
			s.Filter = f
			return nil
		}
	}
	s.fail()
	return err
}

// fail stops the spool after an error and counts its generation's seal
// as failed.
func (s *spooled) fail() {
	s.stop()
	if s.failed != nil {
		*s.failed++
	}
}

func (s *spooled) stop() {
	if s.sp != nil {
		_ = s.sp.Close()
		s.sp = nil
	}
}

// journalBytes returns the memory f holds besides its tables: the journal
// of a young generation, the spool of a Fuse ring's newest one.
func journalBytes(f filter.Filter) uint64 {
	switch f := f.(type) {
	case filter.Regrower:
		if f.Journaling() {
			return f.JournalBytes()
		}
	case *spooled:
		if f.sp != nil {
			return f.sp.MemoryBytes()
		}
	}
	return 0
}

// newFuseActive returns the filter of a new generation id of a Fuse ring:
// a blocked filter for capacity keys and a spool.
func (r *Ring) newFuseActive(id, capacity uint64) (filter.Filter, error) {
	f, err := filter.New(filter.Blocked, capacity, r.fuse.activeFP)
	if err != nil {
		return nil, err
	}
	var sp Spool = &memSpool{}
	if r.cfg.NewSpool != nil {
		if sp, err = r.cfg.NewSpool(id); err != nil {
			// The generation keeps its blocked filter (it will not be
			// sealed): a full disk costs memory, not a commit.
			r.fuse.sealErrors++
			return &spooled{Filter: f, fp: r.fuse.activeFP}, nil
		}
	}
	return &spooled{Filter: f, sp: sp, fp: r.fuse.activeFP, failed: &r.fuse.sealErrors}, nil
}

// sealable reports whether g can be sealed: its filter spools its hashes.
func sealable(g *Generation) (*spooled, bool) {
	s, ok := g.Filter.(*spooled)
	if !ok || s.sp == nil {
		return nil, false
	}
	return s, true
}

// planSeal sets when the next seal is due: the end of the oldest
// spooling generation that is not the newest.
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

// seal replaces g's blocked filter by a fuse filter built from its spool.
// If that fails, g keeps its blocked filter: more memory, no key lost.
func (r *Ring) seal(g *Generation) {
	s, ok := sealable(g)
	if !ok {
		return
	}
	hs, err := s.sp.Hashes()
	var f *filter.FuseFilter
	if err == nil {
		f, err = filter.BuildFuse(hs, r.fuse.width, r.fuse.lateFP)
	}
	s.stop()
	if err != nil {
		r.fuse.sealErrors++
		g.Filter = s.Filter
		return
	}
	r.fuse.seals++
	g.Filter = f
}

// dropSpool discards the spool of an expired generation that was never
// sealed.
func dropSpool(g *Generation) {
	if s, ok := g.Filter.(*spooled); ok {
		s.stop()
	}
}

// CloseSpools discards the spools of a Fuse ring's generations, their
// files and buffers, when the ring's owner is done with it: none is read
// after a restart. The generations keep their blocked filters and are
// not sealed after this.
func (r *Ring) CloseSpools() {
	for _, g := range r.gens {
		dropSpool(g)
	}
	if r.fuse != nil {
		r.planSeal()
	}
}

// FuseSeals returns how many generations a Fuse ring has sealed, and how
// many it could not (no spool could be made, or it failed on a write or a
// read: they keep their blocked filter). A failure counts when it
// happens, before the generation's seal was due.
func (r *Ring) FuseSeals() (sealed, failed int) {
	if r.fuse == nil {
		return 0, 0
	}
	return r.fuse.seals, r.fuse.sealErrors
}
