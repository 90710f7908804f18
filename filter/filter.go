// Package filter holds the approximate-membership filters that form dedup's
// in-memory pre-filter.
//
// Every filter is keyed by a 64-bit hash: the caller hashes each key once
// (dedup uses seeded xxhash64) and passes the hash. A filter answers "no"
// (definitely never added) or "maybe" (added, or a false positive). The
// contract every backend keeps:
//
//   - No false negatives. Once Add or TestOrAdd returns, Test of the same hash
//     reports true for the life of the filter, across growth, serialisation
//     and deserialisation. A backend that cannot insert (a full cuckoo table)
//     grows instead of dropping anything.
//   - Bounded false positives. A filter built by New for (capacity, fp) keeps
//     its estimated false-positive rate at or below fp however many keys it is
//     given: past capacity it chains another filter with a tighter target
//     (the scalable-Bloom construction), so a burst costs memory, not accuracy.
//   - Self-describing bytes. MarshalBinary carries every parameter that shapes
//     the filter; Unmarshal rebuilds it, and rejects truncated or altered bytes
//     with an error wrapping ErrCorrupt, never a panic.
//
// Construction: New(kind, capacity, fp) returns an empty growable filter;
// Unmarshal(MarshalBinary()) restores one. EstimateBytes gives the table
// memory New will allocate.
//
// Concurrency: the read methods (Test, Count, Capacity, SizeBytes, FPRate,
// Kind, MarshalBinary) may run concurrently with each other; Add and
// TestOrAdd need exclusive access (dedup serialises them per shard). So a
// filter no one adds to any more (a final generation's) may be marshalled
// outside the shard lock while Observe keeps testing it.
//
// Hash bits. Each backend takes its positions from h itself, so the caller
// may pick shards from any bijective remix of h (dedup uses the splitmix64
// finalizer) without skewing the false-positive rate of a shard's filter:
// the tests measure it on hashes of one shard of 16. Do not shard on raw
// bits of h (say h>>60) instead: the blocked backend takes its block from
// the high 32 bits, so that would leave a shard's filter using 1/16 of its
// blocks.
//
// Memory per key at capacity, first link (31/32 of the target for bloom
// and blocked, 3/4 for cuckoo, see New):
//
//	kind      fp=1%    fp=0.1%   probes per operation
//	bloom     1.21 B   1.81 B    k = 7 / 10 random cache lines
//	blocked   1.27 B   1.98 B    1 cache line
//	cuckoo    6-12 B   63-125 B  2 cache lines (table rounded up to 2^n)
//	fuse      1.02 B   1.46 B    3 cache lines (static: 7 and 10-bit
//	                             fingerprints, 2^-w = 0.78% and 0.098%)
//
// Three growable backends, and a static one:
//
//   - Bloom: github.com/bits-and-blooms/bloom/v3, k probes spread over the
//     whole bit array (k cache misses per operation on a large filter).
//   - Cuckoo: github.com/seiflotfy/cuckoofilter, 4-slot buckets with 8-bit
//     fingerprints (two cache misses per operation). Its fingerprint width
//     bounds its false-positive rate (about 8*load/255), so lower targets
//     are met by running the table at a lower load: bytes per key double
//     with every halving of the target, and each chained link (twice the
//     keys at half the target) is four times the size of the one before.
//     Prefer bloom or blocked below a few percent, or size it generously so
//     it never grows.
//   - Blocked: a cache-line-blocked Bloom filter of our own: all k bits of a
//     key fall in one 64-byte line, so an operation costs one cache miss.
//   - Interleaved and Wide: the lanes of a [LaneTable] shared by a ring's
//     generations, [LaneView]s. Interleaved packs every generation's lane
//     into one cache line (3.0 B a remembered key at 1% over 4
//     generations); Wide gives each generation a whole blocked line and
//     puts a key's lines side by side (blocked's 2.16 B, one page per
//     lookup across generations).
//   - Fuse: [FuseFilter], a binary fuse filter built once by [BuildFuse]
//     from a set of hashes (github.com/FastFilter/xorfilter), with
//     fingerprints of any width up to 16 bits; hashes added later go to a
//     small blocked overflow. New refuses it: package rotate builds one for
//     each generation that no longer takes new keys.
package filter

import (
	"fmt"

	"github.com/streamdedup/dedup/internal/errclass"
)

// Kind names a filter backend.
type Kind uint8

// The filter backends.
const (
	Bloom   Kind = 1 // github.com/bits-and-blooms/bloom/v3
	Cuckoo  Kind = 2 // github.com/seiflotfy/cuckoofilter
	Blocked Kind = 3 // cache-line-blocked Bloom filter (this package)
	// Interleaved is a lane of a generation-interleaved table (this
	// package, see [LaneTable] and [LaneView]): New returns a view of a
	// one-lane table; package rotate shares one table among a ring's
	// generations.
	Interleaved Kind = 4
	// Fuse is a static binary fuse filter ([FuseFilter], built by
	// [BuildFuse] from a generation's hashes once it is sealed): package
	// rotate keeps a ring's newest generation in a blocked filter with a
	// journal and turns each older one into a fuse filter. New refuses it.
	Fuse Kind = 5
	// Wide is a lane of a generation-interleaved table in the wide layout
	// (see [LaneTableOptions].Wide): each generation owns a whole
	// blocked-Bloom line of every bucket, and a bucket's lines are
	// adjacent, so a lookup across generations reads one bucket of
	// adjacent lines (one page) at blocked's memory per key. New returns a
	// view of a one-lane table; package rotate shares one table among a
	// ring's generations.
	Wide Kind = 6
)

// Laned reports whether kind's filters are lanes of a shared table
// ([LaneView]s): Interleaved and Wide.
func Laned(kind Kind) bool { return kind == Interleaved || kind == Wide }

// Kinds lists every chained backend, in a stable order. Interleaved is not
// among them: its filters are [LaneView]s, not chains.
var Kinds = []Kind{Bloom, Cuckoo, Blocked}

// kindNames are the backends' names, as String returns them and
// ParseKind accepts them.
var kindNames = [...]string{Bloom: "bloom", Cuckoo: "cuckoo", Blocked: "blocked", Interleaved: "interleaved", Fuse: "fuse", Wide: "wide"}

// String returns the backend's name as accepted by ParseKind.
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind returns the Kind named s ("bloom", "cuckoo", "blocked",
// "interleaved", "fuse" or "wide").
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if name != "" && name == s {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("filter: unknown kind %q (want bloom, cuckoo, blocked, interleaved, fuse or wide)", s)
}

// ErrCorrupt marks bytes that Unmarshal cannot accept: truncated, altered, or
// not a filter at all. It matches dedup.ErrCorrupt too. Test with errors.Is.
var ErrCorrupt = errclass.Corrupt("filter: corrupt encoding")

// Prefetcher is implemented by filters that can start loading the memory
// that a Test, Add or TestOrAdd of h will read, without waiting for it.
// Prefetching the hashes a few operations ahead lets their cache misses
// overlap instead of following one another: a filter larger than the
// caches costs one DRAM miss per operation (~100 ns) otherwise.
type Prefetcher interface {
	Prefetch(h uint64)
}

// Filter is an approximate-membership set of 64-bit key hashes.
type Filter interface {
	// Test reports whether h may have been added (true may be a false
	// positive; false is definite).
	Test(h uint64) bool
	// Add inserts h. It never drops a previously added hash. A hash that
	// already tests true is not inserted again (it is held already), so
	// repeats do not fill the filter.
	Add(h uint64)
	// TestOrAdd reports whether h may have been added, then adds it: the
	// check and the insert are one call (one pass over the block for the
	// blocked backend).
	TestOrAdd(h uint64) bool
	// Count returns the number of Add/TestOrAdd calls that inserted: the
	// distinct hashes held, less those that were false positives when
	// added (they test true without being inserted).
	Count() uint64
	// Capacity returns how many hashes the filter holds before it grows:
	// the sum over its links (at least the capacity given to New).
	Capacity() uint64
	// SizeBytes returns the memory held by the filter's tables (all links).
	SizeBytes() uint64
	// FPRate estimates the false-positive rate at the current fill:
	// 1 - prod(1 - rate of each link), each from its backend's own model.
	// At most the fp given to New.
	FPRate() float64
	// Kind returns the backend.
	Kind() Kind
	// MarshalBinary encodes the filter and every parameter that shapes it
	// (format in encoding.go), checksummed. It allocates the whole encoding:
	// about SizeBytes plus a few dozen bytes per link.
	MarshalBinary() ([]byte, error)
}
