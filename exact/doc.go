// Package exact is the exact key store of the dedup engine, built on Pebble v2.
//
// A Store remembers keys per generation, logs the 64-bit hashes of every
// commit so that in-memory filters can be rebuilt on open, and keeps the
// caller's checkpoint (source position) atomically with the keys it covers.
//
// # Contract
//
//   - Batch.Commit is one atomic, fsynced write: after it returns nil, the
//     keys, the log record, the checkpoint and the commit sequence number of
//     that batch survive a crash; after a crash before it returns, either all
//     of them are present or none is. Commit sequence numbers are assigned in
//     commit order, are persisted and never reused.
//   - Checkpoint returns the checkpoint of the newest committed batch that set
//     one (nil if none ever did). It never goes backwards.
//   - DropGenerationsBefore(g) deletes every key of every generation < g,
//     including keys added to the same batch, with one range deletion, and
//     hides the log pairs of those generations from ScanLog.
//   - A Store opened with Options.LogOnly keeps no per-key entries: Add only
//     logs the hash and Has reports ErrLogOnly (probabilistic mode).
//   - Once a write fails (I/O error, full disk...), the Store is broken: every
//     later write and read returns an error wrapping ErrBroken and the first
//     cause. Close it and open it again; what was committed before stays.
//   - Keys are 1..MaxKeySize bytes. A bad key makes the batch's Commit fail
//     with ErrEmptyKey or ErrKeyTooLarge; nothing of that batch is written.
//   - Keys written by a commit in progress may be seen by Has before that
//     Commit returns (Pebble applies a batch to its memtable before the WAL
//     fsync completes); they become durable when Commit returns nil.
//
// # Wire format
//
// Every Pebble key starts with a one-byte tag; integers are big-endian so
// that byte order is numeric order:
//
//	0x00 "dedup-exact"          -> format version (uvarint)  marker of our directories
//	0x01 name                   -> value                     metadata (SetMeta)
//	0x02                        -> checkpoint bytes          last committed checkpoint
//	0x03                        -> gen (8 bytes)             drop floor: generations < gen are gone
//	0x04                        -> seq (8 bytes)             last committed sequence number
//	0x05 seq (8 bytes)          -> log record                one per commit
//	0x06 gen (8 bytes) key      -> empty                     one per stored key
//
// A generation is therefore one contiguous key range, and dropping the
// generations below g is the single range deletion [0x06 0, 0x06 g).
//
// A log record is a format byte (1) followed by runs, each run being
// uvarint(gen) uvarint(n) and n hashes of 8 bytes little-endian. Runs follow
// Add order, so a commit that adds keys of one generation has one run.
//
// # Write paths
//
// By default a commit is one Pebble batch (WAL + memtable), applied with one
// synced WAL write; its keys are sorted first, which makes the memtable
// insert about twice as fast as random order. With Options.IngestThreshold
// set, a commit of at least that many keys is instead written as one sorted
// sstable and ingested with DB.Ingest (no WAL, no memtable). Both are
// atomic: an ingested sstable carries the checkpoint, the sequence number and
// the log record of its commit in the same file. Commits from several
// goroutines are handed to Pebble in sequence-number order and share WAL
// fsyncs.
//
// # Fatal Pebble errors
//
// Pebble treats a failed MANIFEST write as fatal, and its default logger
// exits the process. The Store never lets it: inside a Store call the
// fatal error is returned (wrapping ErrBroken); in one of Pebble's
// background goroutines (a flush or compaction) it breaks the Store, so
// that every later call returns ErrBroken wrapping it, and that goroutine
// ends. Pebble then stays wedged: Close gives up after two seconds, an Open
// waiting for the failed flush returns the error, and the directory stays
// locked until the process exits. What was committed is on disk; the next
// process opens it as after a crash.
//
// A failed flush breaks the Store too: Pebble would retry it for ever and
// stall writes once its memtables are full, so commits would hang. There
// Pebble is not wedged: closing and reopening the Store recovers.
package exact
