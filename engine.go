package dedup

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/sysmem"
	"github.com/streamdedup/dedup/rotate"
)

// Verdict is the answer of Observe for one key.
type Verdict uint8

// The verdicts.
const (
	// New is the first sighting within the window: the caller owns the
	// event, processes it, then Commits (or Forgets it if processing fails).
	New Verdict = 1
	// Duplicate means the key was committed earlier within the window: drop
	// the event.
	Duplicate Verdict = 2
	// InFlight means the key was observed New since the last Commit and is
	// not committed yet: another worker owns it.
	InFlight Verdict = 3
)

// String returns "new", "duplicate" or "in-flight".
func (v Verdict) String() string {
	switch v {
	case New:
		return "new"
	case Duplicate:
		return "duplicate"
	case InFlight:
		return "in-flight"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Meta names in the exact store.
const (
	metaOptions = "options"
	metaSeed    = "seed"
)

// Engine answers, for a stream of keys, whether each was seen within the
// window. All methods are safe for concurrent use.
type Engine struct {
	opts  Options
	kind  filter.Kind
	exact bool // exact mode: filter hits are resolved by the store
	// logCommits: commits write keys (exact mode) or their hashes (the
	// probabilistic log) to the store. An in-memory probabilistic engine
	// never reopens, so its commits write only the checkpoint.
	logCommits bool
	seed       uint64
	shards     []shard
	store      *exact.Store
	// timing is a ring with no filters, used for generation arithmetic.
	timing *rotate.Ring

	inflight atomic.Int64 // keys in flight (not committed), all shards
	// epoch numbers the spans between Barriers; keys observed New carry it.
	epoch atomic.Uint64
	// newestGen is the highest generation any key has gone into: after the
	// clock steps back, new keys still go there, in every shard alike.
	newestGen atomic.Uint64

	fs      vfs.FS
	snapDir string

	// commitGate is held by each commit while it runs, and by Snapshot while
	// it captures the filters: a snapshot holds whole commits.
	commitGate sync.Mutex
	// snapMu serialises snapshots (and backups); lastSnapSeq is the commit
	// sequence of the last snapshot written or restored.
	snapMu      sync.Mutex
	lastSnapSeq uint64

	// lifecycle is held shared by Commit and Snapshot, exclusively by Close.
	lifecycle sync.RWMutex
	closed    atomic.Bool

	// Group commit: callers queue; one leader commits for all.
	cmu     sync.Mutex
	cqueue  []*commitReq
	cleader bool

	cpMu       sync.Mutex
	checkpoint []byte
	commitSeq  uint64

	stats engineStats

	// bgCtx is cancelled by Close; background loops (AutoCommit, periodic
	// snapshots, reclaiming expired generations) run in bg.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

// epochSet is the keys in flight of one epoch of one shard.
type epochSet struct {
	epoch uint64
	set   *pendingSet
}

type commitReq struct {
	limit uint64 // commit the keys of epochs <= limit
	cp    []byte
	err   error
	done  chan struct{}
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
}

// shard owns a slice of the hash space: its filters and in-flight keys.
type shard struct {
	mu     sync.Mutex
	closed bool
	ring   *rotate.Ring
	// inflight holds the keys observed New in epoch (see Barrier); older
	// those of earlier epochs not yet committed, oldest first; committing
	// those a commit is writing (nil otherwise). All answer InFlight.
	inflight   *pendingSet
	epoch      uint64
	older      []epochSet
	committing []epochSet
	// spare holds committed sets for reuse, so that their tables are not
	// allocated (and collected) anew at every epoch.
	spare []*pendingSet
	// recent holds, in exact mode, the sets of the last commits (see
	// recentKeys), oldest first: keys known durable, so that a duplicate
	// of one answers without a store lookup (see recentlyCommitted).
	recent []*pendingSet
	// pendingGens counts the keys in flight per generation: a past
	// generation with none can never change again (it is sealed).
	pendingGens map[uint64]int

	observed, news, dups, inflightHits uint64
	falsePositives, lookups            uint64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// Open opens (or creates) the engine described by opts.
func Open(opts Options) (*Engine, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	kind, _ := filter.ParseKind(opts.Filter)
	e := &Engine{
		opts:       opts,
		kind:       kind,
		exact:      !opts.Probabilistic,
		logCommits: !opts.Probabilistic || opts.Dir != "",
		shards:     make([]shard, opts.Shards),
	}
	span := opts.Window / time.Duration(opts.Generations)
	capacity := shardCapacity(opts.ExpectedRate*span.Seconds(), opts.Shards)
	cfg := rotate.Config{
		Window:            opts.Window,
		Generations:       opts.Generations,
		Kind:              kind,
		Capacity:          capacity,
		FalsePositiveRate: opts.FalsePositiveRate,
	}
	if err := checkMemory(kind, cfg, opts); err != nil {
		return nil, err
	}
	var err error
	if e.timing, err = rotate.New(cfg); err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	for i := range e.shards {
		s := &e.shards[i]
		if s.ring, err = rotate.New(cfg); err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		s.inflight = newPendingSet(0)
		s.pendingGens = make(map[uint64]int)
	}

	fs, dir := opts.FS, opts.Dir
	if dir == "" {
		if fs == nil {
			fs = vfs.NewMem()
		}
		dir = "dedup-mem"
	} else if fs == nil {
		fs = vfs.Default
	}
	e.fs, e.snapDir = fs, fs.PathJoin(dir, SnapshotDir)
	e.store, err = exact.Open(dir, exact.Options{FS: fs, LogOnly: opts.Probabilistic})
	if err != nil {
		return nil, fmt.Errorf("dedup: open state %q: %w", opts.Dir, err)
	}
	if err := e.load(); err != nil {
		return nil, errors.Join(err, e.store.Close())
	}
	e.bgCtx, e.bgCancel = context.WithCancel(context.Background())
	// Errors of background work are counted in Stats (commits, snapshots)
	// or logged (reclaim); the next tick retries.
	if opts.AutoCommit > 0 {
		e.every(opts.AutoCommit, func() { _ = e.commit(math.MaxUint64, nil) })
	}
	if opts.SnapshotInterval > 0 {
		e.every(opts.SnapshotInterval, func() { _ = e.snapshot(false) })
	}
	if e.exact {
		// Expired generations are range-deleted by the commit that expires
		// them but stay on disk (or in memory, Dir "") until compacted:
		// give their space back.
		e.every(max(span/2, time.Second), func() {
			if err := e.store.Reclaim(e.bgCtx); err != nil && e.bgCtx.Err() == nil {
				e.logf("dedup: reclaim expired generations: %v", err)
			}
		})
	}
	return e, nil
}

// load reads the persisted options, seed and checkpoint, or writes them on
// a fresh state, then rebuilds the filters from what was committed.
func (e *Engine) load() error {
	want := e.opts.persisted()
	raw, ok, err := e.store.GetMeta(metaOptions)
	if err != nil {
		return fmt.Errorf("dedup: read options: %w", err)
	}
	if ok {
		have, err := decodePersisted(raw)
		if err != nil {
			return err
		}
		if err := have.compatible(want); err != nil {
			return err
		}
		rawSeed, ok, err := e.store.GetMeta(metaSeed)
		if err != nil {
			return fmt.Errorf("dedup: read seed: %w", err)
		}
		if !ok || len(rawSeed) != 8 {
			return fmt.Errorf("%w: hash seed missing or malformed", ErrCorrupt)
		}
		e.seed = binary.BigEndian.Uint64(rawSeed)
	} else {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("dedup: draw hash seed: %w", err)
		}
		e.seed = binary.BigEndian.Uint64(b[:])
		if err := e.store.SetMeta(metaSeed, beUint64(e.seed)); err != nil {
			return fmt.Errorf("dedup: persist seed: %w", err)
		}
		if err := e.store.SetMeta(metaOptions, want.encode()); err != nil {
			return fmt.Errorf("dedup: persist options: %w", err)
		}
	}
	cp, err := e.store.Checkpoint()
	if err != nil {
		return fmt.Errorf("dedup: read checkpoint: %w", err)
	}
	e.checkpoint = cp
	e.commitSeq = e.store.CommitSeq()
	return e.restore()
}

func beUint64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// checkMemory refuses options whose filters would not fit in the machine's
// memory (generations+1 generations of every shard at their sized capacity),
// rather than dying out of memory at the first Observe.
func checkMemory(kind filter.Kind, cfg rotate.Config, opts Options) error {
	per, err := filter.EstimateBytes(kind, cfg.Capacity, cfg.FalsePositiveRate/float64(cfg.Generations+1))
	if err != nil {
		return fmt.Errorf("%w: ExpectedRate %v over Window %v: %v", ErrInvalidOptions, opts.ExpectedRate, opts.Window, err)
	}
	need := float64(per) * float64(opts.Shards) * float64(cfg.Generations+1)
	if total := sysmem.Total(); total > 0 && need > float64(total) {
		return fmt.Errorf("%w: ExpectedRate %v keys/s over Window %v needs about %.1f GiB of %s filters, more than this machine's %.1f GiB of memory",
			ErrInvalidOptions, opts.ExpectedRate, opts.Window, need/(1<<30), kind, float64(total)/(1<<30))
	}
	return nil
}

// shardCapacity sizes one shard's generation for perGen keys spread over
// shards. The keys a shard receives vary binomially around the mean; a
// shard that passes its capacity by one key chains a filter twice as large,
// so the capacity includes four standard deviations of headroom.
func shardCapacity(perGen float64, shards int) uint64 {
	mean := perGen / float64(shards)
	return uint64(mean+4*math.Sqrt(mean)) + 64
}

// hash is the seeded 64-bit hash of key: seeded per state directory so that
// crafted keys cannot aim at collisions.
func (e *Engine) hash(key []byte) uint64 { return xxh64(key, e.seed) }

// shardIndex picks the shard from a remix of h, so that the shard and the
// filter positions (taken from h itself) are independent.
func (e *Engine) shardIndex(h uint64) int {
	hi, _ := bits.Mul64(mix64(h), uint64(len(e.shards)))
	return int(hi)
}

func (e *Engine) shardOf(h uint64) *shard { return &e.shards[e.shardIndex(h)] }

// mix64 is the splitmix64 finalizer: a bijection whose output bits each
// depend on all input bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func (e *Engine) checkKey(key []byte) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if len(key) > e.opts.MaxKeySize {
		return fmt.Errorf("%w: %d bytes, MaxKeySize is %d", ErrKeyTooLarge, len(key), e.opts.MaxKeySize)
	}
	return nil
}

// Observe reports whether key was seen within the window. New makes the
// caller the owner of the event until it Commits or Forgets it; every other
// Observe of the key meanwhile gets InFlight.
func (e *Engine) Observe(key []byte) (Verdict, error) {
	if err := e.checkKey(key); err != nil {
		return 0, err
	}
	h := e.hash(key)
	s := e.shardOf(h)
	now := e.opts.Now()
	s.mu.Lock()
	v, err := e.observeLocked(s, key, h, now)
	s.mu.Unlock()
	return v, err
}

// ObserveBatch observes keys[i] into out[i], taking each shard's lock once.
// Every key is checked before any is observed: a nil, empty or oversized
// entry fails the whole batch with an error naming its index. If an error
// occurs while observing, the keys not observed have out[i] == 0. Repeated
// keys within a batch get New once and InFlight after.
func (e *Engine) ObserveBatch(keys [][]byte, out []Verdict) error {
	if len(out) < len(keys) {
		return fmt.Errorf("%w: %d keys, %d verdicts", ErrBatchLength, len(keys), len(out))
	}
	for i, k := range keys {
		if err := e.checkKey(k); err != nil {
			return fmt.Errorf("dedup: batch entry %d: %w", i, err)
		}
	}
	clear(out[:len(keys)])
	if len(keys) == 0 {
		return nil
	}
	b := getBatchScratch(len(keys), len(e.shards))
	defer putBatchScratch(b)
	// Counting sort of the keys by shard, stable, so repeats keep order.
	for i, k := range keys {
		h := e.hash(k)
		si := e.shardIndex(h)
		b.hashes[i] = h
		b.shardOf[i] = int32(si)
		b.start[si+1]++
	}
	for i := 1; i < len(b.start); i++ {
		b.start[i] += b.start[i-1]
	}
	pos := b.pos
	copy(pos, b.start[:len(e.shards)])
	for i := range keys {
		si := b.shardOf[i]
		b.order[pos[si]] = int32(i)
		pos[si]++
	}
	now := e.opts.Now()
	gen := e.generationFor(now)
	for si := range e.shards {
		lo, hi := b.start[si], b.start[si+1]
		if lo == hi {
			continue
		}
		s := &e.shards[si]
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		s.ring.Advance(now)
		s.rollEpoch(e.epoch.Load())
		group := b.order[lo:hi]
		maybe := b.probe(s.ring, group)
		pend := b.probePending(s, group, keys, e.exact)
		a := admit{gen: gen}
		e.reserve(&a, len(group))
		for j, i := range group {
			// A key first observed earlier in this group is in s.inflight
			// since the pending probe: ask that set again.
			pending := pend[j] || s.inflight.has(b.hashes[i], keys[i], e.exact)
			v, err := e.decide(s, keys[i], b.hashes[i], maybe[j], pending, &a)
			if err != nil {
				e.finish(s, &a)
				s.mu.Unlock()
				return fmt.Errorf("dedup: batch entry %d: %w", i, err)
			}
			out[i] = v
		}
		e.finish(s, &a)
		s.mu.Unlock()
	}
	return nil
}

type batchScratch struct {
	maybe   []bool
	pend    []bool
	hashes  []uint64
	shardOf []int32
	order   []int32
	start   []int32
	pos     []int32
}

var batchPool sync.Pool

func getBatchScratch(n, shards int) *batchScratch {
	b, _ := batchPool.Get().(*batchScratch)
	if b == nil {
		b = &batchScratch{}
	}
	b.hashes = grow(b.hashes, n)
	b.maybe = grow(b.maybe, n)
	b.pend = grow(b.pend, n)
	b.shardOf = grow(b.shardOf, n)
	b.order = grow(b.order, n)
	b.start = grow(b.start, shards+1)
	clear(b.start)
	b.pos = grow(b.pos, shards)
	return b
}

// probe asks every live generation of r about the keys of group at once,
// generation by generation: the probes of one filter are independent of
// each other, so the processor overlaps their memory misses, where asking
// key by key would wait for each miss in turn. Filters do not change while
// the shard's lock is held, so the answers stay valid for the whole group.
func (b *batchScratch) probe(r *rotate.Ring, group []int32) []bool {
	maybe := b.maybe[:len(group)]
	clear(maybe)
	gens := r.Generations()
	for gi := len(gens) - 1; gi >= 0; gi-- {
		f := gens[gi].Filter
		pf, _ := f.(filter.Prefetcher)
		if pf != nil {
			for _, i := range group[:min(prefetchAhead, len(group))] {
				pf.Prefetch(b.hashes[i])
			}
		}
		for j, i := range group {
			if k := j + prefetchAhead; pf != nil && k < len(group) {
				pf.Prefetch(b.hashes[group[k]])
			}
			maybe[j] = maybe[j] || f.Test(b.hashes[i])
		}
	}
	return maybe
}

// prefetchAhead is how many filter operations ahead probe and the commit's
// inserts prefetch (filter.Prefetcher): enough misses in flight to cover
// DRAM latency, few enough that the lines are still cached when used.
const prefetchAhead = 8

// probePending reports, for each key of group, whether it is in flight
// or being committed in s, set by set for the same reason as probe: the
// lookups of one set are independent, so their cache misses overlap. The
// sets other than s.inflight do not change while the shard's lock is held.
func (b *batchScratch) probePending(s *shard, group []int32, keys [][]byte, exact bool) []bool {
	pend := b.pend[:len(group)]
	clear(pend)
	ask := func(p *pendingSet) {
		if p == nil || p.n == 0 {
			return
		}
		for _, i := range group[:min(prefetchAhead, len(group))] {
			p.prefetch(b.hashes[i])
		}
		for j, i := range group {
			if k := j + prefetchAhead; k < len(group) {
				p.prefetch(b.hashes[group[k]])
			}
			if !pend[j] {
				pend[j] = p.has(b.hashes[i], keys[i], exact)
			}
		}
	}
	ask(s.inflight)
	for _, es := range s.older {
		ask(es.set)
	}
	for _, es := range s.committing {
		ask(es.set)
	}
	return pend
}

func putBatchScratch(b *batchScratch) { batchPool.Put(b) }

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// observeLocked is Observe under the shard's lock.
func (e *Engine) observeLocked(s *shard, key []byte, h uint64, now time.Time) (Verdict, error) {
	if s.closed {
		return 0, ErrClosed
	}
	s.ring.Advance(now)
	s.rollEpoch(e.epoch.Load())
	a := admit{gen: e.generationFor(now)}
	v, err := e.decide(s, key, h, s.ring.Contains(h), s.pending(h, key, e.exact), &a)
	e.finish(s, &a)
	return v, err
}

// admit carries, through a group of decide calls under one shard lock, the
// generation new keys go into and the in-flight slots reserved for them,
// so that the shared counters are touched once per group, not per key.
type admit struct {
	gen      uint64
	reserved int64 // slots of MaxInFlight reserved and not yet used
	news     int   // keys admitted into gen
}

// reserve tries to reserve n in-flight slots at once; without them decide
// checks the limit key by key.
func (e *Engine) reserve(a *admit, n int) {
	if e.inflight.Add(int64(n)) > int64(e.opts.MaxInFlight) {
		e.inflight.Add(-int64(n))
		return
	}
	a.reserved = int64(n)
}

// finish settles a group: counts its new keys against their generation and
// returns unused reserved slots. The shard's lock is held.
func (e *Engine) finish(s *shard, a *admit) {
	if a.news > 0 {
		s.pendingGens[a.gen] += a.news
	}
	if a.reserved > 0 {
		e.inflight.Add(-a.reserved)
	}
}

// decide gives the verdict for key once the filters and the in-flight
// sets have been asked: maybe says whether any live generation may hold h,
// pending whether the key is in flight or being committed. The shard's
// lock is held, the ring is advanced; a New key goes into a.gen.
func (e *Engine) decide(s *shard, key []byte, h uint64, maybe, pending bool, a *admit) (Verdict, error) {
	if pending {
		s.observed++
		s.inflightHits++
		return InFlight, nil
	}
	if maybe {
		if !e.exact {
			s.observed++
			s.dups++
			return Duplicate, nil
		}
		if s.recentlyCommitted(h, key) {
			s.observed++
			s.dups++
			return Duplicate, nil
		}
		var found bool
		var err error
		s.ring.Lookup(h, func(g *rotate.Generation) bool {
			s.lookups++
			found, err = e.store.Has(g.ID, key)
			return err == nil && !found
		})
		if err != nil {
			return 0, fmt.Errorf("dedup: store lookup: %w", err)
		}
		if found {
			s.observed++
			s.dups++
			return Duplicate, nil
		}
		s.falsePositives++
	}
	if a.reserved > 0 {
		a.reserved--
	} else if e.inflight.Add(1) > int64(e.opts.MaxInFlight) {
		e.inflight.Add(-1)
		return 0, fmt.Errorf("%w (MaxInFlight is %d)", ErrTooManyInFlight, e.opts.MaxInFlight)
	}
	s.inflight.add(h, key, a.gen, e.exact)
	a.news++
	s.observed++
	s.news++
	return New, nil
}

// generationFor returns the generation a key observed New at now goes
// into: the one covering now, or the newest one any key went into if the
// clock has stepped back since.
func (e *Engine) generationFor(now time.Time) uint64 {
	id := e.timing.GenerationAt(now)
	for {
		newest := e.newestGen.Load()
		if id <= newest {
			return newest
		}
		if e.newestGen.CompareAndSwap(newest, id) {
			return id
		}
	}
}

// rollEpoch starts epoch cur in s: the keys in flight of the previous
// epoch move to older. The shard's lock is held.
func (s *shard) rollEpoch(cur uint64) {
	if cur == s.epoch {
		return
	}
	if s.inflight.n > 0 {
		s.older = append(s.older, epochSet{s.epoch, s.inflight})
		s.inflight = s.newSet(s.inflight)
	}
	s.epoch = cur
}

// newSet returns an empty in-flight set, a spare one if any, sized for as
// many keys as like, the set it follows. The shard's lock is held.
func (s *shard) newSet(like *pendingSet) *pendingSet {
	var p *pendingSet
	if n := len(s.spare); n > 0 {
		p = s.spare[n-1]
		s.spare = s.spare[:n-1]
	} else {
		p = &pendingSet{}
	}
	p.init(like.n, len(like.arena))
	return p
}

// maxSpare bounds the spare sets a shard keeps.
const maxSpare = 2

// recycle keeps p, which nothing refers to any more, for reuse, unless its
// arena is large. The shard's lock is held.
func (s *shard) recycle(p *pendingSet) {
	if len(s.spare) < maxSpare && cap(p.arena) <= 4<<20 {
		s.spare = append(s.spare, p)
	}
}

// pending reports whether key (hash h) is in flight or being committed.
func (s *shard) pending(h uint64, key []byte, exact bool) bool {
	return s.inflight.has(h, key, exact) || hasIn(s.older, h, key, exact) || hasIn(s.committing, h, key, exact)
}

func hasIn(sets []epochSet, h uint64, key []byte, exact bool) bool {
	for _, es := range sets {
		if es.set.has(h, key, exact) {
			return true
		}
	}
	return false
}

// takeThrough removes and returns the sets of epochs <= limit.
func (s *shard) takeThrough(limit uint64) []epochSet {
	i := 0
	for i < len(s.older) && s.older[i].epoch <= limit {
		i++
	}
	taken := append([]epochSet(nil), s.older[:i]...)
	s.older = append(s.older[:0], s.older[i:]...)
	if s.epoch <= limit && s.inflight.n > 0 {
		taken = append(taken, epochSet{s.epoch, s.inflight})
		s.inflight = s.newSet(s.inflight)
	}
	return taken
}

// unpend drops one in-flight key of generation gen from the count.
func (s *shard) unpend(gen uint64) { s.unpendN(gen, 1) }

// unpendN drops n in-flight keys of generation gen from the count.
func (s *shard) unpendN(gen uint64, n int) {
	if c := s.pendingGens[gen]; c > n {
		s.pendingGens[gen] = c - n
	} else {
		delete(s.pendingGens, gen)
	}
}

// addCommitted puts the keys of the committing sets, now durable, into
// their generations' filters (those still live at now), and keeps the sets
// (exact mode: for recentlyCommitted, then for reuse). It is Ring.Add key
// by key, with the generation looked up once per run of keys of one
// generation. The shard's lock is held.
func (s *shard) addCommitted(now time.Time, exact bool, nshards int) error {
	var firstErr error
	oldest := s.ring.OldestLive(now)
	for _, es := range s.committing {
		var f filter.Filter
		gen, run := uint64(0), 0
		flush := func() {
			if run > 0 {
				s.unpendN(gen, run)
			}
		}
		var pf filter.Prefetcher
		add := func(h uint64, en pendingEntry) {
			if run == 0 || en.gen != gen {
				flush()
				gen, run, f, pf = en.gen, 0, nil, nil
				if gen >= oldest {
					g, err := s.ring.Get(gen)
					if err != nil {
						if firstErr == nil {
							firstErr = err
						}
					} else {
						f = g.Filter
						pf, _ = f.(filter.Prefetcher)
					}
				}
			}
			run++
			if f != nil {
				f.Add(h)
			}
		}
		ents := es.set.ents
		for j, en := range ents {
			// Prefetch the key that comes prefetchAhead later, if it goes
			// to the same filter (runs of one generation are long).
			if k := j + prefetchAhead; pf != nil && k < len(ents) && ents[k].gen == gen {
				pf.Prefetch(ents[k].h)
			}
			add(en.h, en)
		}
		for _, en := range es.set.zero {
			add(0, en)
		}
		flush()
		if exact {
			s.remember(es.set, recentKeys/nshards)
		} else {
			s.recycle(es.set)
		}
	}
	return firstErr
}

// recentKeys bounds the committed keys an exact-mode engine keeps in
// memory, across shards, to answer their duplicates without a store lookup
// (about 100 bytes each, ~50 MB at the bound); recentSets bounds the sets a
// shard keeps (one per commit), since a lookup probes each. Duplicates come
// mostly soon after their first event: on the dedup command's benchmark
// (commits of 100k events, duplicates up to 1M events apart) keeping the
// last ~5 commits cut store lookups from 216k to ~60k per GB.
const (
	recentKeys = 512 << 10
	recentSets = 8
)

// remember keeps p, a set just committed, in recent, dropping (for reuse)
// the oldest sets past recentSets or past maxKeys keys. The shard's lock is
// held.
func (s *shard) remember(p *pendingSet, maxKeys int) {
	s.recent = append(s.recent, p)
	n := 0
	for _, r := range s.recent {
		n += r.n
	}
	drop := 0
	for drop < len(s.recent) && (len(s.recent)-drop > recentSets || n > maxKeys) {
		n -= s.recent[drop].n
		s.recycle(s.recent[drop])
		drop++
	}
	s.recent = append(s.recent[:0], s.recent[drop:]...)
}

// recentlyCommitted reports whether key (hash h) was committed by one of
// the shard's last commits into a generation still live: a Duplicate, with
// no store lookup. The shard's lock is held.
func (s *shard) recentlyCommitted(h uint64, key []byte) bool {
	for i := len(s.recent) - 1; i >= 0; i-- {
		gen, ok := s.recent[i].lookup(h, key)
		if !ok {
			continue
		}
		for _, g := range s.ring.Generations() {
			if g.ID == gen {
				return true
			}
		}
		return false // expired: its store range is dropped, or will be
	}
	return false
}

// Forget releases a key observed New and not yet committed: its processing
// failed, and its next Observe is New again. It returns ErrNotInFlight if
// the key is not in flight, including when a Commit that holds it has
// already begun.
func (e *Engine) Forget(key []byte) error {
	if err := e.checkKey(key); err != nil {
		return err
	}
	h := e.hash(key)
	s := e.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	gen, ok := s.inflight.remove(h, key, e.exact)
	for i := 0; !ok && i < len(s.older); i++ {
		gen, ok = s.older[i].set.remove(h, key, e.exact)
	}
	if ok {
		s.unpend(gen)
		e.inflight.Add(-1)
		return nil
	}
	if hasIn(s.committing, h, key, e.exact) {
		return fmt.Errorf("%w: its commit has begun", ErrNotInFlight)
	}
	return ErrNotInFlight
}

// Commit makes every key observed New since the last commit durable,
// together with checkpoint, in one atomic, fsynced step, and returns once
// it is. After a crash, committed keys are remembered, keys in flight are
// not, and Checkpoint returns the last committed checkpoint. A nil
// checkpoint keeps the previous one. Concurrent Commits share one write.
func (e *Engine) Commit(checkpoint []byte) error {
	e.lifecycle.RLock()
	defer e.lifecycle.RUnlock()
	if e.closed.Load() {
		return ErrClosed
	}
	return e.commit(math.MaxUint64, checkpoint)
}

// Barrier is a point in an engine's stream of New verdicts; see
// Engine.Barrier.
type Barrier uint64

// Barrier marks the keys observed New so far: CommitThrough(b, cp) makes
// exactly those durable (with cp), while keys observed after Barrier
// returned stay in flight. A consumer can so keep observing the next
// events while the previous ones commit:
//
//	b := e.Barrier()           // everything up to offset X is observed
//	go e.CommitThrough(b, X)   // commits those keys, with X
//	... observe the events after X meanwhile ...
//
// Keys whose Observe runs concurrently with Barrier fall on either side.
func (e *Engine) Barrier() Barrier { return Barrier(e.epoch.Add(1) - 1) }

// CommitThrough is Commit restricted to the keys observed New before
// barrier b (see Barrier): they become durable together with checkpoint;
// keys observed after b stay in flight. Concurrent commits share one write.
func (e *Engine) CommitThrough(b Barrier, checkpoint []byte) error {
	e.lifecycle.RLock()
	defer e.lifecycle.RUnlock()
	if e.closed.Load() {
		return ErrClosed
	}
	return e.commit(uint64(b), checkpoint)
}

// commit queues a commit request; the first caller to find no leader
// becomes it and commits for every request queued meanwhile.
func (e *Engine) commit(limit uint64, checkpoint []byte) error {
	req := &commitReq{limit: limit, done: make(chan struct{})}
	if checkpoint != nil {
		req.cp = append([]byte{}, checkpoint...)
	}
	e.cmu.Lock()
	e.cqueue = append(e.cqueue, req)
	if e.cleader {
		e.cmu.Unlock()
		<-req.done
		return req.err
	}
	e.cleader = true
	for len(e.cqueue) > 0 {
		group := e.cqueue
		e.cqueue = nil
		e.cmu.Unlock()
		// One write for the group, through its furthest barrier, with the
		// checkpoint that goes with that barrier (the last one given).
		var limit uint64
		var cp []byte
		for _, r := range group {
			limit = max(limit, r.limit)
		}
		for _, r := range group {
			if r.cp != nil && r.limit == limit {
				cp = r.cp
			}
		}
		if cp == nil {
			for _, r := range group {
				if r.cp != nil {
					cp = r.cp
				}
			}
		}
		err := e.commitOnce(limit, cp)
		for _, r := range group {
			r.err = err
			close(r.done)
		}
		e.cmu.Lock()
	}
	e.cleader = false
	e.cmu.Unlock()
	return req.err
}

// commitOnce writes the keys in flight and cp in one batch. Keys stay
// visible as InFlight (in the shards' committing sets) until the batch is
// durable and they are in their filters, so no Observe sees a gap.
func (e *Engine) commitOnce(limit uint64, cp []byte) error {
	e.commitGate.Lock()
	defer e.commitGate.Unlock()
	start := time.Now()
	now := e.opts.Now()
	oldest := e.timing.OldestLive(now)
	batch := e.store.NewBatch()
	n := 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		s.rollEpoch(e.epoch.Load())
		s.committing = s.takeThrough(limit)
		s.mu.Unlock()
		// committing is only written by the commit leader: reading it
		// without the lock is safe.
		for _, es := range s.committing {
			c := es.set
			n += c.n
			if !e.logCommits {
				continue
			}
			c.each(func(h uint64, en pendingEntry) {
				if en.gen >= oldest {
					batch.Add(en.gen, c.key(en), h)
				}
			})
		}
	}
	// A range delete only when a generation has expired since the last
	// one: each tombstone costs every later lookup until compacted away.
	if oldest > e.store.DroppedBefore() {
		batch.DropGenerationsBefore(oldest)
	}
	if cp != nil {
		batch.SetCheckpoint(cp)
	}
	seq, err := batch.Commit()
	var addErr error
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		if err != nil {
			// Not durable: back in flight, for a later Commit.
			s.older = append(s.committing, s.older...)
		} else {
			if aerr := s.addCommitted(now, e.exact, len(e.shards)); aerr != nil && addErr == nil {
				addErr = aerr
			}
		}
		s.committing = nil
		s.mu.Unlock()
	}
	d := time.Since(start)
	if err != nil {
		e.stats.commitErrors.Add(1)
		msg := err.Error()
		e.stats.lastCommitErr.Store(&msg)
		return fmt.Errorf("dedup: commit: %w", err)
	}
	e.inflight.Add(-int64(n))
	e.cpMu.Lock()
	if cp != nil {
		e.checkpoint = cp
	}
	e.commitSeq = seq
	e.cpMu.Unlock()
	e.stats.commits.Add(1)
	e.stats.committedKeys.Add(uint64(n))
	e.stats.commitNanos.Add(uint64(d))
	e.stats.lastCommitNs.Store(int64(d))
	if int64(d) > e.stats.maxCommitNs.Load() {
		e.stats.maxCommitNs.Store(int64(d))
	}
	if addErr != nil {
		return fmt.Errorf("dedup: commit: filters: %w", addErr)
	}
	return nil
}

// Checkpoint returns a copy of the last committed checkpoint, nil if none.
func (e *Engine) Checkpoint() []byte {
	e.cpMu.Lock()
	defer e.cpMu.Unlock()
	if e.checkpoint == nil {
		return nil
	}
	return append([]byte{}, e.checkpoint...)
}

// every runs fn at each tick of interval until Close.
func (e *Engine) every(interval time.Duration, fn func()) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-e.bgCtx.Done():
				return
			case <-t.C:
				fn()
			}
		}
	}()
}

// Close stops background work and closes the state. Under AutoCommit it
// commits the keys in flight first; otherwise they are dropped, as a crash
// would drop them. With SnapshotInterval it writes a last snapshot; its
// failure is returned wrapped in [ErrSnapshot] (joined with any other), the
// committed state intact. Every method returns ErrClosed afterwards.
func (e *Engine) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	e.bgCancel()
	e.bg.Wait()
	e.lifecycle.Lock()
	defer e.lifecycle.Unlock()
	var errs []error
	if e.opts.AutoCommit > 0 {
		if err := e.commit(math.MaxUint64, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if e.opts.SnapshotInterval > 0 {
		// A fresh snapshot makes the next Open fast.
		if err := e.snapshot(true); err != nil {
			errs = append(errs, err)
		}
	}
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		s.closed = true

		s.mu.Unlock()
	}
	if err := e.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("dedup: close store: %w", err))
	}
	return errors.Join(errs...)
}
