package dedup

import (
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/advisor"
)

// Internals that the external tests (package dedup_test) pin.

// RecentSets is the number of recent commits a shard answers duplicates of
// from memory.
const RecentSets = recentSets

// EngineOptions returns the options e runs with, defaults filled.
func EngineOptions(e *Engine) Options { return e.opts }

// EngineKind returns e's filter kind.
func EngineKind(e *Engine) filter.Kind { return e.kind }

// SetSeed replaces e's hash seed.
func SetSeed(e *Engine, seed uint64) { e.seed = seed }

// ShardOfKey returns the index of the shard key goes to.
func ShardOfKey(e *Engine, key []byte) int { return e.shardIndex(e.hash(key)) }

// Filter generations.

// GenerationKinds returns, per shard, the filter kind of each live
// generation, oldest first (tests of Filter "fuse").
func GenerationKinds(e *Engine) [][]filter.Kind {
	out := make([][]filter.Kind, len(e.shards))
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		for _, g := range s.ring.Generations() {
			out[i] = append(out[i], g.Filter.Kind())
		}
		s.mu.Unlock()
	}
	return out
}

// The commit log, snapshot.go and restore.go.

// LogTruncatedThrough returns the commit sequence through which e's commit
// log was truncated, as recorded in the store (0: never).
func LogTruncatedThrough(e *Engine) (uint64, error) { return e.logTruncatedThrough() }

// LogPairs returns the number of (generation, hash) pairs e's commit log
// still holds.
func LogPairs(e *Engine) (int, error) {
	n := 0
	err := e.store.ScanLog(0, func(_, _, _ uint64) error { n++; return nil })
	return n, err
}

// LastCommitSeq returns the sequence number of e's last commit.
func LastCommitSeq(e *Engine) uint64 {
	e.cpMu.Lock()
	defer e.cpMu.Unlock()
	return e.commitSeq
}

// The shadow filter (shadow.go).

// Sampled reports whether key falls in the sample of the hash space that
// e's shadow covers (the observed false-positive rate).
func Sampled(e *Engine, key []byte) bool { return sampled(e.hash(key)) }

// The window advisor (internal/advisor).

// SampleLevel is the level of key in the window advisor's horizon sample:
// the key is in a sample of 1 in 2^k when its level is k or more.
func SampleLevel(e *Engine, key []byte) int { return advisor.SampleLevel(e.hash(key)) }

// HorizonBytes is the memory the advisor's horizons hold, over shards.
func HorizonBytes(e *Engine) uint64 {
	var n uint64
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		n += s.adv.HorizonBytes()
		s.mu.Unlock()
	}
	return n
}

// DisableAdvice turns e's window advisor and observed-FP shadow off, for
// a benchmark of what they cost; e must not be in use.
func DisableAdvice(e *Engine) {
	for i := range e.shards {
		e.shards[i].noAdvice = true
	}
}

// ClaimsHeld is the number of claims of this process the engine keeps in
// memory.
func ClaimsHeld(e *Engine) int {
	n := 0
	for i := range e.idem.shards {
		s := &e.idem.shards[i]
		s.mu.Lock()
		n += len(s.owners)
		s.mu.Unlock()
	}
	return n
}

// RestoreBackupFS is RestoreBackup with every file operation on fsys.
var RestoreBackupFS = restoreBackup
