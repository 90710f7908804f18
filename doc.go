// Package dedup removes duplicate events from high-volume streams: for each
// key it answers whether the key was seen within a time window, in memory
// for almost every event, exactly where it matters, and across crashes.
//
// # How it answers
//
// A key is hashed once (xxhash64, seeded per state directory so crafted
// keys cannot aim at collisions) and routed to one of Options.Shards
// shards by a remix of the hash. Under the shard's lock, Observe checks the
// keys in flight (observed New, not yet committed), then the shard's ring
// of filter generations (package rotate over package filter), newest first.
// If every filter says "no" the key is New, with no disk read. If some
// filter says "maybe", exact mode looks the key up in the exact store
// (package exact, on Pebble) under each generation that said maybe: found
// is Duplicate, not found is New and counts a false positive in Stats.
// Probabilistic mode keeps no store and reports Duplicate.
//
// # Contract
//
// Every implementation keeps these semantics:
//
//  1. Atomic. All methods are safe for concurrent use. For one key, among
//     any number of concurrent Observe calls exactly one gets New; the others
//     get InFlight, or Duplicate once committed.
//  2. Window. A key observed New at t is reported InFlight or Duplicate to
//     every Observe at t' with t'-t < Window, and is New again by
//     t'-t >= Window + Window/Generations. A clock that steps backwards never
//     expires anything early.
//  3. No false negatives. No filter, rotation, growth, snapshot or restore
//     path loses a committed key inside the window.
//  4. Exact mode (the default) never reports New wrongly; a filter false
//     positive costs one store lookup. Probabilistic mode drops an event on
//     a false positive, at Options.FalsePositiveRate.
//  5. Commit and checkpoint. Commit(cp) makes every key observed New since
//     the last commit durable together with cp, in one atomic, fsynced step.
//     After a crash committed keys are remembered, uncommitted ones are not,
//     and Checkpoint returns the last committed cp: a consumer that resumes
//     its source from there processes every event exactly once. Forget
//     releases an InFlight key. Close commits only under AutoCommit;
//     otherwise it drops what is in flight, as a crash would.
//  6. Restart. Open restores the filters from the newest valid snapshot and
//     replays the commits after it; a corrupt or missing snapshot is
//     reported (Stats.RestoreProblems) and, in exact mode, rebuilt from the
//     store; it is never silently replaced by an empty filter. Reopening
//     with incompatible options is an error naming the option.
//  7. Bad input (an empty key, a key over MaxKeySize, a nil batch entry, a
//     state directory of another program, a damaged snapshot) is a clear
//     error wrapping a sentinel of this package; nothing committed is lost.
//
// # State directory
//
// Options.Dir holds the exact store (a Pebble database: committed keys
// under their generation, the checkpoint, the options and hash seed, and a
// log of committed key hashes since the last snapshot) and the snapshots/
// folder (package snapshot). Dir "" runs the same engine on an in-memory
// file system. Backup, RestoreBackup and RebuildSnapshot copy, install and
// repair state directories; the dedup command wraps them.
//
// # Map
//
// [Open] creates or reopens an [Engine] described by [Options].
// [Engine.Observe] and [Engine.ObserveBatch] answer each key with a
// [Verdict]. [Engine.Commit], or [Engine.Barrier] then
// [Engine.CommitThrough], makes the keys in flight durable with a
// checkpoint ([Engine.Checkpoint] reads it back); [Engine.Forget] releases
// one. [Engine.Snapshot], [Engine.Backup], [RestoreBackup],
// [RebuildSnapshot] and [StateOptions] manage the state directory;
// [Engine.Stats] reports [Stats]. Errors wrap this package's sentinels
// (ErrClosed, ErrCorrupt, ...); [ErrCorrupt] is the corruption class of
// every layer below too.
//
// In the source: engine.go holds the Engine and its lock order, open.go
// Open and recovery, observe.go the Verdict and the observe path, inflight.go the in-flight
// key set, shard.go a shard's filters and in-flight sets, commit.go group
// commit and barriers, snapshot.go and restore.go writing and restoring
// snapshots, backup.go backups, stats.go Stats, options.go Options.
package dedup
