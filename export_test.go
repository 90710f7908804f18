package dedup

import "github.com/streamdedup/dedup/filter"

// Internals that the external tests (package dedup_test) pin.

// RecentSets is the number of recent commits a shard answers duplicates of
// from memory.
const RecentSets = recentSets

// Mix64 is the remix of a key's hash that picks its shard.
var Mix64 = mix64

// EngineOptions returns the options e runs with, defaults filled.
func EngineOptions(e *Engine) Options { return e.opts }

// EngineKind returns e's filter kind.
func EngineKind(e *Engine) filter.Kind { return e.kind }

// SetSeed replaces e's hash seed.
func SetSeed(e *Engine, seed uint64) { e.seed = seed }

// ShardOfKey returns the index of the shard key goes to.
func ShardOfKey(e *Engine, key []byte) int { return e.shardIndex(e.hash(key)) }
