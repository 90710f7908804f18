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
//     get InFlight, or Duplicate once committed (under ExplicitDone, once
//     Done).
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
//     the last commit durable together with cp, in one atomic, fsynced step
//     (under ExplicitDone: every key Done, see Worker pools). After a crash
//     committed keys are remembered, uncommitted ones are not, and
//     Checkpoint returns the last committed cp: a consumer that resumes its
//     source from there processes every event exactly once. Forget
//     releases an InFlight key. Concurrent commits share one write; the
//     durable checkpoint is that of the furthest Barrier committed (a plain
//     Commit ranks by when it began) and never moves back (see
//     [Engine.Commit]). Close commits only under
//     AutoCommit; otherwise it drops what is in flight, as a crash would,
//     and reports how many in Stats.DroppedAtClose and the log.
//  6. Restart. Open restores the filters from the newest valid snapshot and
//     replays the commits after it; a corrupt or missing snapshot is
//     reported (Stats.RestoreProblems) and, in exact mode, rebuilt from the
//     store; it is never silently replaced by an empty filter. Options left
//     zero on reopen take the state directory's values; an explicit value
//     that contradicts the directory's shape is an error naming the option.
//  7. Bad input (an empty key, a key over MaxKeySize, a nil batch entry, a
//     state directory of another program, a damaged snapshot) is a clear
//     error wrapping a sentinel of this package; nothing committed is lost.
//     MaxKeySize is at most what the exact store holds (exact.MaxKeySize),
//     so a key Observe accepts always commits.
//
// # Worker pools
//
// The sequential pattern (observe, process, commit) is right for one loop:
// by the time it commits, it has processed every key it observed. With a
// pool of workers, a commit made by one goroutine would also make durable
// the keys other workers are still processing; if one of them then fails,
// its Forget is refused, and after a crash its event is Duplicate although
// it was never processed. For worker pools set Options.ExplicitDone:
//
//   - A worker that gets New owns the event. It processes it, then calls
//     [Engine.Done] ([Engine.DoneBatch] for many); if processing fails it
//     calls [Engine.Forget] instead and tries the event again.
//   - Until Done the key stays in flight across any number of commits:
//     other workers get InFlight and Forget still works. From Done on they
//     get Duplicate, before the commit: under the watermark rule below, if
//     that commit never happens neither event is below the durable
//     watermark, and both are read again ([Engine.Done] has the argument).
//     Commit and CommitThrough make durable only keys that are Done (for
//     CommitThrough, Done before its Barrier). Forget after Done fails with
//     ErrAlreadyDone; Done of a key not in flight with ErrNotInFlight.
//   - A worker that gets InFlight tries the event again once the owner is
//     Done or has forgotten the key, until its verdict is New (the owner
//     forgot it: this worker owns it now) or Duplicate. It never drops it:
//     the owner may still fail and Forget the key.
//   - The checkpoint is a low watermark: the source position below which
//     every event is Done or Duplicate. Make the output part of it (the
//     length of an output file, say, truncated back to it on restart), and
//     take the watermark, the output length and the [Engine.Barrier] for
//     [Engine.CommitThrough] under the one lock that also orders each
//     worker's output write, Done and completion: the commit then holds
//     exactly the keys whose output the checkpoint covers.
//   - MaxInFlight counts keys not yet Done too: past it Observe fails with
//     ErrTooManyInFlight until workers Done or Forget keys and a commit
//     runs.
//
// [Pool] runs this recipe: it takes the processing function and an output
// hook, owns the ordering lock, the watermark and the Barrier, commits by
// count or timer, and parks events whose key another worker owns
// (Example_pool). An HTTP server is a worker pool too: with ExplicitDone,
// Done and a Barrier per request, one request's commit never makes
// another's key durable before its work exists (Example_httpHandler).
// TestWorkerPoolCrash and TestPoolCrash hold the recipe and Pool to
// exactly-once output under SIGKILL.
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
// checkpoint ([Engine.Checkpoint] reads it back; [Engine.CommitContext]
// and [Engine.CommitThroughContext] bound the wait by a context);
// [Engine.Forget] releases one, and under ExplicitDone [Engine.Done] marks
// one processed; [Pool] runs a worker pool over them. [Engine.Snapshot], [Engine.Backup], [RestoreBackup], [RebuildSnapshot]
// and [StateOptions] manage the state directory; [Engine.Stats] reports
// [Stats]. Errors wrap this package's sentinels
// (ErrClosed, ErrCorrupt, ...); [ErrCorrupt] is the corruption class of
// every layer below too.
//
// In the source, a file per concept:
//
//   - engine.go: the Engine, its lock order, Close
//   - open.go: Open and recovery, the options a state records ([StateOptions])
//   - options.go: [Options], their defaults and validation
//   - sizing.go: the size of the filters and of the store's memtable for
//     the workload Options describe ([Options.FilterCeiling])
//   - errors.go: the sentinel errors
//   - lock_unix.go and lock_other.go: which process holds a state's lock
//   - hash.go: the key hash (XXH64, seeded)
//   - shard.go: a shard's filters and in-flight sets
//   - inflight.go: the set of keys in flight
//   - recent.go: the compact copy of recently committed keys
//   - observe.go: the [Verdict], Observe, ObserveBatch and Forget, and
//     the store lookup behind a filter hit
//   - eventtime.go: the window on event time ([Engine.ObserveBatchTimes]),
//     keys in flight past their window New again
//   - refresh.go: the sliding window ([Options.Refresh]): renewals
//   - peek.go: Peek
//   - done.go: Done and DoneBatch (ExplicitDone)
//   - pool.go: [Pool], the worker pool that owns the watermark and commits.
//     It stays in this package, beside the engine it drives, because it
//     refuses an engine opened without ExplicitDone and a closed one at
//     NewPool, which the exported API does not tell; the rest of it uses
//     only exported methods
//   - idem.go: idempotency keys with stored results ([Engine.Begin],
//     [Engine.Complete], [Engine.Release])
//   - idem_table.go: the claims held in memory, one owner a key
//   - idem_store.go: the records behind them in the exact store
//   - commit.go: group commit, barriers and the checkpoint
//   - snapshot.go and restore.go: writing snapshots, restoring from them
//   - backup.go: Backup (a consistent copy of a live state, never partial
//     under its name)
//   - backup_restore.go: RestoreBackup (verify a backup, install it with
//     every file fsynced) and RebuildSnapshot
//   - check.go and repair.go: Check (every block checksum of the store),
//     LastCommit (the last commit the store holds, read without a change)
//     and Repair (accept the loss of commits a snapshot proves)
//   - spool.go: the spool files of Filter fuse's newest generation
//   - shadow.go: the sampled shadow behind the observed false-positive rate
//   - stats.go: [Stats]
//   - savedadvice.go: the last window advice measured, kept in the state
//     ([Stats.SavedWindowAdvice])
//   - clock.go: the event clock of [Options.EventTime]
//   - autowindow.go: [AutoWindow], the window that sizes itself from the
//     advice, and [Engine.Window]
//
// The window advisor ([WindowAdvice]: duplicate delays by cohort age, the
// horizon past the window, the delay model and the window for a target)
// is a package of its own, internal/advisor: a shard feeds it counts once
// per group of keys observed, and the verdict path does not enter it.
//
// # Words
//
// Across the module one word names one thing. Options configure what a
// package opens, builds or runs ([Options], [PoolOptions],
// exact.Options, kafka.Options, resp.Options, bench.StreamOptions): zero
// fields take their defaults. Config describes one run of a program: a benchmark's input
// (bench.CompareConfig, bench.KafkaConfig, ...) or a command's parsed
// flags. Seal is what Filter fuse does to a generation that takes no more
// keys: its blocked filter becomes a static fuse filter; nothing else is
// sealed. A record is a result record, the value kept with a key
// ([Engine.Complete], exact's PutRecord); the commit log holds log
// entries. An epoch is the span between two [Engine.Barrier] calls, the
// keys observed New in it committed together; the commit log's number
// raised by every Open is its era. The environment variables the
// commands, benchmarks and tests define are named DEDUP_*.
package dedup
