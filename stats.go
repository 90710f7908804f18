package dedup

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/advisor"
	"github.com/streamdedup/dedup/internal/diskuse"
	"github.com/streamdedup/dedup/internal/fprate"
)

// Stats is a point-in-time view of an Engine's counters and memory.
type Stats struct {
	// Observed counts keys observed (Observe and ObserveBatch entries).
	Observed uint64
	// New, Duplicate and InFlightVerdicts count the verdicts given: New,
	// Duplicate and InFlight answers. They count answers, not keys (see
	// InFlightKeys).
	New, Duplicate, InFlightVerdicts uint64
	// InFlight is InFlightVerdicts.
	//
	// Deprecated: the count of InFlight verdicts read as a count of keys
	// in flight; use InFlightVerdicts (answers) or InFlightKeys (keys).
	InFlight uint64
	// InFlightKeys is the number of keys observed New and not yet
	// committed (or forgotten). Under ExplicitDone, NotDoneKeys of them
	// are not Done yet (the others are Done and wait for a commit).
	InFlightKeys int64
	NotDoneKeys  int64
	// DroppedAtClose is the number of keys in flight that Close dropped,
	// as a crash would (0 before Close).
	DroppedAtClose int64
	// StoreLookups counts exact-store lookups made for filter hits.
	StoreLookups uint64
	// FalsePositives counts keys that some filter said "maybe" for but the
	// exact store did not hold (exact mode): the false positives the store
	// resolved, each costing one or more StoreLookups.
	FalsePositives uint64
	// Generations is the number of generations in the window (not expired
	// at the engine's clock) summed over shards; GenerationStats has one
	// entry per generation ID, summed over shards, oldest first.
	Generations     int
	GenerationStats []GenerationStats
	// Seals counts the generations sealed into static fuse filters
	// ([Options.Filter] "fuse", see [GenerationStats.Sealed]) since [Open], and
	// SealErrors those that will not be, because their spool of hashes
	// could not be made, written or read back (a full disk): they keep
	// their blocked filter, which takes more memory and loses no key, and
	// Logf says why once a generation. Both count per shard: a generation
	// sealed in each of 16 shards counts 16. 0 with the other filters.
	Seals, SealErrors uint64
	// FilterBytes is the memory held by all filters.
	FilterBytes uint64
	// FilterKeys is the number of keys held by all filters.
	FilterKeys uint64
	// SizedGenerationKeys is the number of keys a new generation's filters
	// are sized for, summed over shards: 1.5x the keys the generation
	// before held, at most what ExpectedRate gives over a generation's
	// span; while the first generation grows, its current size (memory
	// follows the traffic).
	SizedGenerationKeys uint64
	// ObservedFPSamples and ObservedFPRate measure the filters' false
	// positives on the real traffic, for every filter kind: keys in a fixed
	// 1/1024 of the hash space are also remembered exactly (with their
	// generation) when committed; of the observes of such keys that were
	// not in flight and that no live generation held (ObservedFPSamples),
	// the share the filters matched anyway is ObservedFPRate (in
	// probabilistic mode, the share of new events dropped; in exact mode
	// the store resolves them, see FalsePositives). While
	// ObservedFPSamples is 0 the rate is 0 and means not measured yet. The
	// exact shadow is not in snapshots: after Open from a snapshot, a shard
	// counts nothing until the generations it restored have expired (a
	// window and a span); after a rebuild from the commit log or the store
	// it counts at once.
	ObservedFPSamples uint64
	ObservedFPRate    float64
	// InFlightBytes is the memory held by the sets of keys in flight: the
	// keys observed New and not committed yet (or being committed), with
	// their tables sized for as many keys as the last commit took, and
	// the emptied sets kept for the next ones (released once a commit
	// finds a shard idle).
	InFlightBytes uint64
	// CacheKeys is the number of committed keys exact mode keeps in memory
	// to answer their duplicates without a store lookup (the newest keys
	// of the last commits), and CacheBytes the memory they take. The
	// cache is bounded by an eighth of the memory the filters take when
	// the window is full. 0 in probabilistic mode and without a Dir (the
	// store is in memory: its lookups cost what the cache's do).
	CacheKeys  uint64
	CacheBytes uint64
	// EstimatedFPRate is the false-positive rate a new key meets across
	// the live generations at their current fill, averaged over shards.
	EstimatedFPRate float64
	// Commits counts successful commits; CommitErrors failed ones, the last
	// of which is LastCommitError.
	Commits, CommitErrors uint64
	// CommittedKeys counts keys made durable by commits.
	CommittedKeys uint64
	// CommitLatencyMean, CommitLatencyLast and CommitLatencyMax describe
	// how long commits took (including the fsync).
	CommitLatencyMean, CommitLatencyLast, CommitLatencyMax time.Duration
	// LastCommitError is the message of the last failed commit, "" if none.
	LastCommitError string
	// RestoredKeys is the number of keys put back into the filters by Open,
	// and RestoreDuration how long that took.
	RestoredKeys    uint64
	RestoreDuration time.Duration
	// RestoredFrom says where Open found the filters: "fresh", "snapshot",
	// "store", "log" or "empty". RestoreProblems lists what Open found wrong
	// on the way (a corrupt snapshot skipped, say).
	RestoredFrom    string
	RestoreProblems []string
	// Snapshots counts snapshots written, SnapshotErrors failed ones (the
	// last is LastSnapshotError). LastSnapshotDuration is how long the last
	// one took, LastSnapshotWritten how many bytes it wrote (final
	// generations are not rewritten) and SnapshotBytes its total size.
	Snapshots, SnapshotErrors uint64
	LastSnapshotError         string
	LastSnapshotDuration      time.Duration
	LastSnapshotWritten       int64
	SnapshotBytes             int64
	// WindowAdvice is the window advisor's estimate: how late duplicates
	// come and how many the window lets through (docs/window.md).
	WindowAdvice WindowAdvice
	// AutoWindow is the window in force and, under [Options.AutoWindow],
	// what sized it.
	AutoWindow AutoWindowStats
	// SavedWindowAdvice is the last WindowAdvice measured with duplicates
	// counted, by this engine or, kept in the state directory
	// ([SavedAdviceFile]), by one before it on the same state, with the
	// time it was measured; nil if none was. Every Stats call that
	// measures one saves it, so a tool that only opens the state (dedup
	// stats) shows what the last job measured.
	SavedWindowAdvice *SavedWindowAdvice
	// DiskBytes is the space the state directory takes on its file system,
	// as du counts it: the blocks allocated to the exact store (tables,
	// write-ahead logs, manifest) and the snapshots. In memory (Dir "") it
	// is the length of the in-memory files.
	DiskBytes uint64
}

// GenerationStats describes one generation across all shards.
type GenerationStats struct {
	// ID numbers the generation: it covers [Start, End) of the engine's
	// clock.
	ID         uint64
	Start, End time.Time
	// Keys is the number of keys its filters hold, Bytes their memory.
	Keys  uint64
	Bytes uint64
	// FPRate is the mean estimated false-positive rate of the generation's
	// filters at their current fill.
	FPRate float64
	// Kind names the kind of the generation's filters ([filter.Kind]'s
	// String: "bloom", "cuckoo", "blocked", "interleaved" or "fuse"). When
	// shards differ, it is every kind in that order joined by "+", such as
	// "blocked+fuse": with Filter "fuse", a shard whose seal failed keeps
	// the blocked filter the others replaced.
	Kind string
	// Sealed reports whether the generation's filter is sealed in every
	// shard: with [Options.Filter] "fuse", rebuilt as a static fuse filter once a
	// newer generation took over (smaller; the few keys committed into it
	// later go into its small overflow). The newest generation is never
	// sealed, and with the other filters none is. This is not a snapshot
	// segment's "final" (`dedup snapshot inspect`), which says a segment
	// can no longer change.
	Sealed bool
}

// Stats returns the engine's counters, and the generations live at the
// engine's clock now. It takes each shard's lock briefly.
func (e *Engine) Stats() Stats {
	var st Stats
	if e.usable() != nil {
		return st
	}
	gens := map[uint64]*GenerationStats{}
	kinds := map[uint64]uint64{} // bit k: a shard's filter is of Kind k
	var order []uint64
	var fpSum float64
	var fpObserved uint64
	advT := e.adv.NewTotals()
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		// A shard's ring drops expired generations when it is next used;
		// report the generations live now, as that use would leave them.
		// The clock is read under the lock: read before it, a clock that
		// moved on while Stats waited would count, beside the live ones,
		// the newer generations other callers made meanwhile.
		s.ring.Advance(e.opts.Now())
		st.Observed += s.observed
		st.New += s.news
		st.Duplicate += s.dups
		st.InFlightVerdicts += s.inflightHits
		st.StoreLookups += s.lookups
		st.FalsePositives += s.falsePositives
		st.FilterBytes += s.ring.FilterBytes()
		st.SizedGenerationKeys += s.ring.SizedCapacity()
		sealed, failed := s.ring.FuseSeals()
		st.Seals += uint64(sealed)
		st.SealErrors += uint64(failed)
		st.ObservedFPSamples += s.sampledNew
		fpObserved += s.sampledFP
		if s.undone != nil {
			st.NotDoneKeys += int64(s.undone.n)
		}
		st.InFlightBytes += s.inflightBytes()
		st.CacheBytes += s.recentBytes + s.freeBytes
		for _, r := range s.recent {
			st.CacheKeys += uint64(r.n)
		}
		var fps []float64
		for _, g := range s.ring.Generations() {
			f := g.Filter
			st.Generations++
			st.FilterKeys += f.Count()
			fp := f.FPRate()
			fps = append(fps, fp)
			gs := gens[g.ID]
			if gs == nil {
				gs = &GenerationStats{ID: g.ID, Start: e.timing.Start(g.ID), End: e.timing.End(g.ID), Sealed: true}
				gens[g.ID] = gs
				order = append(order, g.ID)
			}
			kinds[g.ID] |= 1 << (f.Kind() % 64)
			// A fuse filter is only ever made by a seal.
			gs.Sealed = gs.Sealed && f.Kind() == filter.Fuse
			gs.Keys += f.Count()
			gs.Bytes += f.SizeBytes()
			gs.FPRate += fp / float64(len(e.shards))
		}
		fpSum += fprate.Any(fps...)
		advT.Add(s.adv)
		s.mu.Unlock()
	}
	st.EstimatedFPRate = fpSum / float64(len(e.shards))
	st.WindowAdvice = advT.Advice(e.opts.Now(), st.Observed, st.New)
	st.AutoWindow = e.autoStats()
	st.SavedWindowAdvice = e.noteAdvice(st.WindowAdvice)
	if st.ObservedFPSamples > 0 {
		st.ObservedFPRate = float64(fpObserved) / float64(st.ObservedFPSamples)
	}
	slices.Sort(order)
	for _, id := range order {
		gs := gens[id]
		gs.Kind = kindNames(kinds[id])
		st.GenerationStats = append(st.GenerationStats, *gs)
	}
	st.InFlightKeys = e.inflightCount.Load()
	st.InFlight = st.InFlightVerdicts
	st.Commits = e.stats.commits.Load()
	st.CommitErrors = e.stats.commitErrors.Load()
	st.CommittedKeys = e.stats.committedKeys.Load()
	if st.Commits > 0 {
		st.CommitLatencyMean = time.Duration(e.stats.commitNanos.Load() / st.Commits)
	}
	st.CommitLatencyLast = time.Duration(e.stats.lastCommitNs.Load())
	st.CommitLatencyMax = time.Duration(e.stats.maxCommitNs.Load())
	if p := e.stats.lastCommitErr.Load(); p != nil {
		st.LastCommitError = *p
	}
	st.RestoredKeys = e.stats.restoredKeys
	st.RestoreDuration = time.Duration(e.stats.restoreNanos)
	st.RestoredFrom = e.stats.restoredFrom
	st.RestoreProblems = append([]string(nil), e.stats.restoreProblems...)
	st.Snapshots = e.stats.snapshots.Load()
	st.SnapshotErrors = e.stats.snapshotErrors.Load()
	if p := e.stats.lastSnapshotErr.Load(); p != nil {
		st.LastSnapshotError = *p
	}
	st.LastSnapshotDuration = time.Duration(e.stats.lastSnapshotNs.Load())
	st.LastSnapshotWritten = e.stats.lastSnapshotWritten.Load()
	st.SnapshotBytes = e.stats.snapshotBytes.Load()
	st.DroppedAtClose = e.stats.droppedAtClose.Load()
	// Files that go away meanwhile (a compaction's inputs) are skipped; an
	// error leaves the count of what was read.
	st.DiskBytes, _ = diskuse.Bytes(e.fs, e.dir)
	return st
}

// kindNames names the filter kinds of the set bits (bit k: Kind k), in
// order, joined by "+".
func kindNames(set uint64) string {
	var names []string
	for k := range 64 {
		if set&(1<<k) != 0 {
			names = append(names, filter.Kind(k).String())
		}
	}
	return strings.Join(names, "+")
}

// engineStats are counters outside the shards.
type engineStats struct {
	commits         atomic.Uint64
	commitErrors    atomic.Uint64
	committedKeys   atomic.Uint64
	commitNanos     atomic.Uint64
	lastCommitNs    atomic.Int64
	maxCommitNs     atomic.Int64
	lastCommitErr   atomic.Pointer[string]
	restoredKeys    uint64
	restoreNanos    int64
	restoredFrom    string
	restoreProblems []string

	snapshots           atomic.Uint64
	snapshotErrors      atomic.Uint64
	lastSnapshotNs      atomic.Int64
	lastSnapshotWritten atomic.Int64
	snapshotBytes       atomic.Int64
	lastSnapshotErr     atomic.Pointer[string]

	droppedAtClose atomic.Int64
}

// WindowAdvice is the window advisor's estimate, in [Stats]: how late
// duplicates come, how many the window lets through, and which window
// would let fewer through. docs/window.md describes the estimator.
type WindowAdvice = advisor.Advice
