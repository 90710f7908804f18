package dedup

import (
	"fmt"
	"math"
	"time"

	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/sysmem"
	"github.com/streamdedup/dedup/rotate"
)

// The sizing arithmetic: how large the filters and the exact store's
// memtable are made for the workload Options describe, and whether that
// fits in the machine's memory.

// Bounds on the exact store's memtable (see memTableSize).
const (
	minMemTable = 4 << 20
	maxMemTable = 64 << 20
)

// memTableSize sizes the exact store's memtable (exact.Options.MemTableSize:
// the store's own table of appends, which takes the latest commits until a
// background flush writes them to Pebble as sorted tables) for the
// workload opts describe: the smaller of a full window's keys at 128 bytes
// each and a minute of ExpectedRate at 40 bytes each (a key's 16-byte
// fingerprint, its index entry and its commit-log hash take about 36 bytes
// in the table, BenchmarkMemTable in exact/), a power of two within
// [4 MiB, 64 MiB]. Measured with
// BenchmarkMemTableSize in exact/ (commits of 5000 random 16-byte keys):
// 64 MiB spent 10-20% less CPU per key than 16 MiB and 4 MiB, whose
// flushes are 7 and 30 times as many, but holds up to twice its size while
// a flush runs and makes Open replay up to 1.9M keys (0.6 s). A table that
// fills in a minute at the expected rate flushes once a minute, which costs
// nothing measurable; a burst above the rate flushes more often. A state
// that receives few keys holds and replays only those, whatever the limit.
func memTableSize(opts Options) uint64 {
	keys := opts.ExpectedRate * (opts.Window + opts.Window/time.Duration(opts.Generations)).Seconds()
	want := min(keys*128, opts.ExpectedRate*memTableSeconds*40)
	size := uint64(minMemTable)
	for size < maxMemTable && float64(size) < want {
		size *= 2
	}
	return size
}

// memTableSeconds is the traffic, in seconds of ExpectedRate, that
// memTableSize fits in the memtable.
const memTableSeconds = 60

// blockCacheSize sizes the exact store's block cache (exact.Options.
// CacheSize, on top of which Pebble charges its own two memtables, 8 MiB)
// as large as the memtable, so that both follow ExpectedRate. The cache
// serves the store's lookups, which the filters send only for duplicates
// and false positives, a share of the rate: the index blocks of a window's
// tables take a few MiB, and a data block is hit again only by a key looked
// up twice, so a cache beyond that holds little that is read again
// (docs/benchmarks.md, dedup serve against redis-server).
func blockCacheSize(opts Options) int64 {
	return int64(memTableSize(opts))
}

// checkMemory refuses options whose filters would not fit in the machine's
// memory (generations+1 generations of every shard at their sized capacity),
// rather than dying out of memory at the first Observe.
func checkMemory(kind filter.Kind, cfg rotate.Options, opts Options) (need float64, err error) {
	per, err := rotate.EstimateBytes(cfg)
	if err != nil {
		return 0, fmt.Errorf("%w: ExpectedRate %v over Window %v: %w", ErrInvalidOptions, opts.ExpectedRate, opts.Window, err)
	}
	need = float64(per) * float64(opts.Shards)
	if total := sysmem.Total(); total > 0 && need > float64(total) {
		return 0, fmt.Errorf("%w: ExpectedRate %v keys/s over Window %v needs about %.1f GiB of %s filters, more than this machine's %.1f GiB of memory",
			ErrInvalidOptions, opts.ExpectedRate, opts.Window, need/(1<<30), kind, float64(total)/(1<<30))
	}
	return need, nil
}

// ringConfig is the ring of generations every shard keeps under opts
// (defaults filled in), sized for ExpectedRate.
func ringConfig(kind filter.Kind, opts Options) rotate.Options {
	span := opts.Window / time.Duration(opts.Generations)
	return rotate.Options{
		Window:            opts.Window,
		Generations:       opts.Generations,
		Kind:              kind,
		Capacity:          shardCapacity(opts.ExpectedRate*span.Seconds(), opts.Shards),
		FalsePositiveRate: opts.FalsePositiveRate,
	}
}

// FilterCeiling returns the filter memory an engine opened with o holds at
// most while the traffic stays within ExpectedRate: every shard's
// Generations+1 generations at the size ExpectedRate gives them, as [Open]
// logs it. Filters start smaller and follow the traffic (see
// [Stats.SizedGenerationKeys]). Zero fields take their defaults; invalid
// options are an error wrapping [ErrInvalidOptions].
func (o Options) FilterCeiling() (uint64, error) {
	o.WithDefaults()
	if err := o.Validate(); err != nil {
		return 0, err
	}
	kind, err := filter.ParseKind(o.Filter)
	if err != nil {
		return 0, fmt.Errorf("%w: Filter: %w", ErrInvalidOptions, err)
	}
	per, err := rotate.EstimateBytes(ringConfig(kind, o))
	if err != nil {
		return 0, fmt.Errorf("%w: ExpectedRate %v over Window %v: %w", ErrInvalidOptions, o.ExpectedRate, o.Window, err)
	}
	return per * uint64(o.Shards), nil
}

// shardCapacity sizes one shard's generation for perGen keys spread over
// shards. The keys a shard receives vary binomially around the mean: the
// capacity includes two standard deviations of headroom, so that at the
// rate configured about one shard-generation in 40 chains a growth link (a
// quarter of its filter); more would cost false-positive rate for nothing,
// since a filter short of its capacity misses its target (2.4% short, as
// four deviations and 64 keys made it at 31k keys a shard, is 12% under).
func shardCapacity(perGen float64, shards int) uint64 {
	mean := perGen / float64(shards)
	return uint64(mean+2*math.Sqrt(mean)) + 16
}
