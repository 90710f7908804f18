// Package exact is the exact key store of the dedup engine, built on Pebble v2.
//
// A Store remembers keys per generation, as their keyed 128-bit
// fingerprints (SipHash-2-4-128 under a secret of the store: no key is
// kept at rest), logs the 64-bit hashes of every commit so that in-memory
// filters can be rebuilt on open, and keeps the caller's checkpoint
// (source position) atomically with the keys it covers.
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
//   - DropGenerationsBefore(g) raises the drop floor to g: every key of every
//     generation < g is gone for Has and ScanFingerprints, including keys added to
//     the same batch or later, and the log pairs of those generations are
//     hidden from ScanLog. Reclaim gives their disk space back.
//   - A Store opened with Options.LogOnly keeps no per-key entries: Add only
//     logs the hash and Has reports ErrLogOnly (probabilistic mode).
//   - Once a write fails (I/O error, full disk...), the Store is broken: every
//     later write and read returns an error wrapping ErrBroken and the first
//     cause. Close it and open it again; what was committed before stays.
//   - Keys are 1..MaxKeySize bytes. A bad key makes the batch's Commit fail
//     with ErrEmptyKey or ErrKeyTooLarge; nothing of that batch is written.
//   - A result record (Batch.PutRecord, Store.PutRecord) is a value of at
//     most MaxRecordSize bytes stored under a key's Fingerprint in a
//     generation; it is committed like the keys (durable when Commit
//     returns nil), GetRecord finds it in the newest generation at or
//     above the drop floor that holds one, and it leaves with its
//     generation. Fingerprint is SipHash-2-4-128 keyed with a random
//     secret created with the store and kept in it (in a backup too).
//   - Keys written by a commit in progress may be seen by Has before that
//     Commit returns (they enter the memtable before the log's fsync
//     completes); they become durable when Commit returns nil.
//
// # Write path
//
// Keys are written once and leave by whole generations, so the store does
// not use Pebble's write-ahead log and memtable for them (a skiplist
// insert, a cache miss per level, took most of the commit's CPU):
//
//  1. Commit appends one checksummed record (fingerprints, hashes unless
//     they are the fingerprints' first halves, checkpoint, drop) to the
//     current segment of its own commit log and fsyncs it; commits
//     running at the same time share fsyncs (commitlog.go).
//  2. The fingerprints go into the active memtable: per generation, an
//     arena of 16-byte fingerprints outside the Go heap and a
//     hash-partitioned index for Has (memtable.go).
//  3. When the memtable reaches Options.MemTableSize it is frozen with its
//     segment, and a background flush writes it to Pebble: its fingerprints sorted
//     into one sstable per generation, a Bloom filter per generation, and
//     its log records, ingested in one atomic step; then the sequence
//     number, checkpoint and drop floor of its last commit, synced through
//     Pebble; then the segment is retired (flush.go). Commits stall while
//     more than two frozen memtables wait.
//  4. A retired segment is renamed and reused by a later one (the first
//     segment of an Open reuses the last one replayed), and a segment
//     grows with zeros ahead of its records (chunks of a quarter of the
//     memtable's size, at most a MiB): an fsync that
//     overwrites allocated blocks changes no file-system metadata.
//  5. Open replays the segments past the last flushed commit (a torn record
//     ends the log) and flushes them.
//
// Each flush writes a generation's fingerprints as a key range of its own
// (generation, flush), so that no two tables overlap: every table goes to
// Pebble's last level and none is ever compacted. Has asks Pebble only for
// the flushes whose in-memory filter may hold the key (keyfilter.go):
// about one table read for a stored key, one per hundred flushes for an
// absent one. Reclaim drops expired generations by excising their ranges
// (whole tables, nothing rewritten).
//
// # Wire format
//
// Every Pebble key starts with a one-byte tag; integers are big-endian so
// that byte order is numeric order:
//
//	0x00 "dedup-exact"            -> format version (1 byte)   marker of our directories
//	0x00 "dedup-exact-upgrading"  -> old format (1 byte)       an upgrade whose cleanup is not done yet
//	0x01 name                     -> value                     metadata (SetMeta)
//	0x02                          -> checkpoint bytes          checkpoint of the last flushed commit
//	0x03                          -> gen (8 bytes)             drop floor: generations < gen are gone
//	0x04                          -> seq (8 bytes)             last flushed sequence number
//	0x05 seq (8 bytes)            -> log record                one per commit
//	0x06 gen (8 bytes) key        -> empty                     a key stored by format 1 (upgraded away)
//	0x07                          -> seq (8 bytes)             log records of seq <= it are truncated
//	0x08 gen flush (8 bytes) key  -> empty                     a key stored by format 2 (upgraded away)
//	0x09 gen flush (8 bytes)      -> key filter                a filter of format 2 (upgraded away)
//	0x0a                          -> era (8 bytes)             commit log era of the last Open
//	0x0b gen (8 bytes) fp (16)    -> value                     a result record (PutRecord)
//	0x0c                          -> secret (16 bytes)         the fingerprint secret
//	0x0d gen flush (8 bytes) fp (16) -> empty                  a key's fingerprint, written by flush number flush
//	0x0e gen flush (8 bytes)      -> filter                    the Bloom filter of that flush's fingerprints
//	0x0f n (8 bytes)              -> empty                     scratch of an upgrade, excised at once
//
// A flush's number is the sequence number of its first commit. A log
// record is a format byte (1) followed by runs, each run being
// uvarint(gen) uvarint(n) and n hashes of 8 bytes little-endian. Runs
// follow Add order, so a commit that adds keys of one generation has one
// run. Result records are written to Pebble by the flush, with its commit
// state, in one synced batch (records are replaced and deleted, so they
// go through Pebble's own memtable); Reclaim removes those of expired
// generations with a range deletion. A key filter is a format byte (1)
// and 64-byte blocks of 8 little-endian words; a fingerprint sets 7 bits
// of one block, chosen by its second 8 bytes.
//
// Commits past the last flush are in the commit log's segments,
// exact-commits-NNNNNN (retired ones waiting for reuse are
// exact-commits-free-NNNNNN), described in commitlog.go. A segment's
// number is era<<32 | count, the era raised durably by every Open, so
// that no number is ever given twice. Format 3 (this one) keeps
// fingerprints instead of keys (tags 0x0d-0x0f); format 2 added the commit
// log and tags 0x07-0x0a. A store of format 1 or 2 is upgraded when
// opened, crash-safely, its keys still found (upgrade.go); one of a newer
// format is refused with ErrNewerFormat.
//
// # Fatal Pebble errors
//
// Pebble treats a failed MANIFEST write as fatal, and its default logger
// exits the process. The Store never lets it: inside a Store call, or in
// the store's own flush goroutine, the fatal error is returned (wrapping
// ErrBroken); in one of Pebble's background goroutines (a flush or
// compaction of its metadata) it breaks the Store, so that every later
// call returns ErrBroken wrapping it, and that goroutine ends. Pebble then
// stays wedged: Close gives up after two seconds, an Open waiting for the
// failed flush returns the error, and the directory stays locked until the
// process exits. What was committed is on disk; the next process opens it
// as after a crash.
//
// A failed flush breaks the Store too; closing and reopening it recovers
// (the commit log still holds what the flush did not write).
//
// # Damage at rest
//
// Every block of a table carries a checksum, checked when it is read. A
// block that fails it makes the read (Has, GetRecord, a scan) return an
// error matching ErrCorrupt that names the table file; the Store stays
// open, and reads that do not need that block go on. Check reads every
// block of every table, and every record of the commit log, without
// opening the store for writing.
package exact
