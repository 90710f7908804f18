package main

const filterHelpHead = `Usage: dedup filter [flags] [FILE...]

Reads events (NDJSON by default, or plain lines), writes each event whose
key was not seen within --window to the output, once, in input order.
Inputs are the FILEs and --in FILEs in order; none (or -) is stdin.

Keys
  --format json --key event_id        the raw JSON text of a member
  --format json --key user.id,seq     several members, each path dotted from
                                      the top of the object: user.id and seq
                                      of {"user":{"id":7},"seq":1}; for
                                      {"user":{"id":7,"seq":1}} it is
                                      --key user.id,user.seq
  --format lines                      the whole line
  --format lines --field 3 --delim ,  the 3rd comma-separated field
  --format lines --regex 'id=(\w+)'   the first group of a regexp

  A JSON key is the raw text of the value as it appears in the line: 1 and
  "1" are different keys, and so are "a" and "\u0061". A null value counts
  as missing. Several fields make one key of each value's length and text,
  so ("a,b","c") and ("a","b,c") differ.

Bad lines
  A line that is not a JSON object, lacks a key field, has an empty key
  ("" in JSON) or a key over --max-key bytes is rejected: it goes to
  --rejects (or stderr, its control bytes escaped) as
  "FILE:LINE: REASON<TAB>LINE" and is counted. With --strict the first
  one stops the run with exit status 2 (the lines before it are done).
  A run that rejects every line it reads, or more than half of at least
  1000, ends with exit status 2 and one line naming the commonest reason
  (a wrong --key, say), after committing what it did. A resumed job
  counts its earlier lines too: one stray line read alone is no failure.

Exactly once, file to file
  With --state DIR, files as inputs and --out FILE, every commit records
  the input position and the output lengths with the keys. Killed at any
  moment (kill -9) and run again with the same command, dedup truncates
  the outputs to the committed lengths and resumes the input where the
  commit left it: the output holds every distinct event exactly once.
  A completed job run again reads only what was appended to its last
  input since; a last line without a newline is left for that later run
  (it may be being written), except on stdin, where the end of the input
  ends the line. The input at the position must be the same file: one
  rotated or rewritten since (another inode, other bytes before the
  position, or shorter) is an error naming it.

  A run that is not the state's last job (other inputs, or --from-start)
  reads its inputs from the start, with the same remembered keys, and
  appends to the state's output files; it never truncates an output file
  that holds events the state remembers: inputs in another order without
  --from-start, or an existing file that is not the state's output, are
  refused (exit status 2) unless --overwrite.

Rotated logs
  Give the rotated file first, from the first run on (touch it if it does
  not exist yet):
      dedup filter --state S --key id --in app.log.1 --in app.log --out O
  After a rotation (renamed, or copied and truncated) the run finds the
  committed position in app.log.1, by its inode or, for a copy, its
  bytes, reads what it got after the last run, then app.log from its
  start. Keep app.log.1 uncompressed (logrotate's delaycompress), run
  often enough that a log is rotated at most once between runs (else give
  app.log.2 first too), and have the writer reopen the log when it is
  rotated (postrotate): lines written to app.log.1 after a run read past
  its end are not read (a warning names it). --from-start reads app.log
  from its start instead, app.log.1's tail unread.

State directory
  --state DIR keeps the keys in DIR. A new DIR takes its shape from
  --window, --generations, --shards, --filter and --probabilistic; an
  existing one keeps its own: a flag left out is adopted from DIR, and a
  flag given with another value is an error (exit status 2) naming it.
  --rate, --fp and the commit flags may change from run to run. The
  filters are snapshotted every --snapshot-interval and at the end of the
  run, so a restart loads them instead of rebuilding them from the store;
  a last snapshot that cannot be written (a full disk) is a warning, the
  state being committed. Problems met restoring them (a damaged snapshot
  skipped, say) are logged on stderr as "dedup: engine: ...". A DIR is
  used by one process at a time.

  A flag given a zero or out-of-range value (--fp 0, --shards 0) is an
  error naming it, never replaced by the default.

Signals
  SIGINT or SIGTERM, even while the input is idle, ends the run with exit
  status 1, after committing what was written with --state; with files as
  inputs, run the same command again to resume (stdin cannot be resumed:
  its keys committed count as duplicates in a rerun).

Examples
  # Distinct events of a stream, keys in memory.
  cat events.ndjson | dedup filter --key event_id > distinct.ndjson

  # Resumable, exactly once; duplicates and bad lines kept aside.
  dedup filter --state ./state --key event_id \
      --in events.ndjson --out distinct.ndjson \
      --dups dups.ndjson --rejects rejects.txt --stats

  # A composite key: user.id and seq of {"user":{"id":7},"seq":1}.
  dedup filter --key user.id,seq events.ndjson > distinct.ndjson

  # Access log lines, keyed by request id, remembered for a day.
  dedup filter --format lines --regex 'req=([0-9a-f]+)' --window 24h \
      --state ./state access.log > access.dedup.log

  # Fast and approximate: about 0.1% of new events dropped, no store.
  dedup filter --probabilistic --fp 0.001 --key id big.ndjson > out.ndjson

  # Prometheus metrics at http://127.0.0.1:9090/metrics while it runs.
  dedup filter --key id --metrics 127.0.0.1:9090 --in big.ndjson --out out.ndjson

Flags
`

const filterHelpTail = `
Exit status
  0  success (a last snapshot that could not be written is a warning)
  1  runtime error (I/O, state directory, an input rotated since the
     committed position), or interrupted by SIGINT/SIGTERM (committed)
  2  bad usage, options that contradict the state directory, an output
     that would lose remembered events, a rejected line under --strict,
     or a run that rejected most of its lines
`

const statsHelpHead = `Usage: dedup stats [flags] DIR

Prints what the state directory DIR holds: its options, generations, keys,
filter memory, disk size, where the filters were restored from (and any
problem met), the newest snapshot, and the last committed position of
'dedup filter'. The options are read from DIR: no flag is needed. The
flags --window, --filter, --probabilistic, --generations and --shards only
check: given, they fail with exit status 2 if DIR says otherwise.

While another process holds DIR (a running 'dedup filter --state DIR'),
Pebble's lock keeps the store from a second opener: stats then prints
what it reads without the lock, from the newest snapshot (options, keys,
commit covered) and the directory's size, and says so ("in use"; in JSON
"in_use": true, without "checkpoint" and "engine"). The running filter's
live figures are on its --metrics.

--json prints snake_case names, and durations in seconds (named
*_seconds).

Examples
  dedup stats ./state
  dedup stats --json ./state | jq .checkpoint
  dedup stats --json ./state | jq '.snapshot, .engine.restored_from'

Flags
`

const statsHelpTail = `
Exit status
  0  printed (a state in use included)
  1  DIR is missing, not a state directory, or fails to open
  2  bad usage, or a check flag that contradicts DIR
`

const snapshotHelp = `Usage: dedup snapshot <inspect|verify|rebuild> [flags] PATH

A state directory keeps snapshots of its filters in DIR/snapshots (a
manifest, snapshot-NNNNNN.manifest, and one segment file per generation
and shard), so that a restart loads the filters instead of rebuilding them.

  inspect PATH   generations, spans, key counts, fill, estimated false-positive
                 rate and sizes of the newest snapshot
  verify PATH    check every checksum and decode every filter;
                 exit status 0 valid, 1 invalid
  rebuild DIR    rebuild the filters of an exact-mode state from its store
                 and write a fresh snapshot (repairs a damaged or lost one)

PATH is a manifest file, a snapshots folder, or a state directory.

Examples
  dedup snapshot inspect ./state
  dedup snapshot inspect --json ./state/snapshots | jq .estimated_fp_rate
  dedup snapshot verify ./state || dedup snapshot rebuild ./state

Run 'dedup snapshot <subcommand> -h' for its flags.
`

const inspectHelpHead = `Usage: dedup snapshot inspect [flags] PATH

Prints the newest snapshot at PATH (a manifest file, a snapshots folder, or
a state directory): the commit it covers, its options and size, and per
generation its span, whether it is final (its segments are written once
and reused by later snapshots) or live, its keys, file size, fill
(keys / capacity) and estimated false-positive rate. The fill and FP come
from decoding every filter, which reads (and so verifies) every payload;
--quick reads only the manifest and segment headers. The overall
"estimated FP" is the rate a new key meets across all generations.
Inspecting a snapshot does not open the state: it works on a state in use.

Examples
  dedup snapshot inspect ./state
  dedup snapshot inspect --segments ./state/snapshots/snapshot-000042.manifest
  dedup snapshot inspect --json ./state | jq '.generations[] | {id, keys, fill}'

Flags
`

const inspectHelpTail = `
Exit status
  0  printed
  1  no snapshot at PATH, or the newest one is damaged (see verify)
  2  bad usage
`

const verifyHelpHead = `Usage: dedup snapshot verify [flags] PATH

Verifies the snapshots at PATH (a manifest file, a snapshots folder, or a
state directory: every snapshot in it, usually the newest and the one
kept before it): the manifest's checksums, each segment's size, metadata
and checksums, and that each payload decodes to the filter the manifest
describes. In a state directory, each snapshot is also compared with the
last commit its store holds: a snapshot past it is INVALID, naming both
commits (the store lost the commits between; 'dedup repair DIR' accepts
the loss). Prints "ok" or "INVALID" and the reason, naming the file, per
snapshot.

A damaged newest snapshot does not lose keys: an exact-mode state falls
back to the previous snapshot or rebuilds from its store on the next start;
'dedup snapshot rebuild DIR' writes a good one now.

Examples
  dedup snapshot verify ./state
  dedup snapshot verify --newest ./state && echo restart will be fast

Flags
`

const verifyHelpTail = `
Exit status
  0  every snapshot verified is valid
  1  a snapshot is invalid (reasons on stdout), or there is none at PATH
  2  bad usage
`

const rebuildHelp = `Usage: dedup snapshot rebuild DIR

Rebuilds the filters of the exact-mode state directory DIR from every key
in its store, ignoring its snapshots, and writes a fresh snapshot: the
repair for a snapshot that is damaged or was deleted. Prints the keys
restored and the time taken. A probabilistic state has no store to rebuild
from: restore a good snapshot of it instead ('dedup restore').
DIR must not be in use by another process.

Example
  dedup snapshot rebuild ./state

Exit status
  0  rebuilt, snapshot written
  1  DIR is missing, not a state, probabilistic, in use, or an I/O error
  2  bad usage
`

const backupHelp = `Usage: dedup backup [--copy | --link] DIR DEST

Writes a consistent copy of the state DIR into DEST, a directory that must
not exist yet and must not lie inside DIR: a fresh snapshot of the filters,
a Pebble checkpoint of the store, and last a manifest (dedup-backup.json)
listing every store file with its length and hash. The copy holds every
committed key and the last committed checkpoint of 'dedup filter'. DIR is
a state directory, or a 'dedup serve --state' directory: then every table
is backed up, each with its table.json.

The backup is written under a hidden name beside DEST
(.DEST.partial-PID-N) and renamed to DEST once whole: an interrupted
backup never leaves a partial DEST, and the next backup to DEST removes
the hidden folder it left ('dedup restore' refuses it). Every file is copied (--copy, the
default), so the backup shares no byte with DIR; --link hard-links the store's files
instead where the file system allows (fast, no extra disk on the same
file system, but a damaged block is then damaged in both: a view to roll
back to, not a copy to keep).

DIR must not be in use by another process: stop the 'dedup filter' that
holds it (it commits on SIGINT/SIGTERM), back up, then start it again. A
running 'dedup serve' is backed up live with DEDUP.BACKUP (see
docs/serve.md); a program that embeds the engine uses Engine.Backup. A
copy of a running state with cp -a is not a backup: it can miss
committed keys, and 'dedup restore' refuses it.

Examples
  dedup backup ./state /backups/state-2025-01-31
  dedup restore /backups/state-2025-01-31 ./state.new

Exit status
  0  backed up
  1  DIR is missing, not a state, in use; DEST exists or lies inside DIR; or an I/O error
  2  bad usage

Flags
`

const restoreHelp = `Usage: dedup restore SRC DIR

Installs SRC into DIR, a new or empty state directory, after verifying it:
SRC is a backup written by 'dedup backup' or DEDUP.BACKUP (of a state
directory or of a whole 'dedup serve' state, every table with its
table.json), or, for a probabilistic state, a lone snapshot folder (the
snapshots folder of a state, or a copy of it). Every store file is checked
against the backup's manifest (a file missing, cut or changed: the backup
is damaged, and the message names the file), then the state is copied to
a scratch folder beside DIR, opened there (its snapshot verified), every
file and folder fsynced, and renamed to DIR; SRC is never modified. It
refuses a DIR that holds anything, a SRC or DIR open in another process,
and a directory without a manifest: a copy of a running state (cp -a) is
not a backup (it can miss committed keys). Prints the options, keys and
checkpoint installed.

Then run 'dedup filter --state DIR ...' as before: the flags that shape
the state are adopted from it, and the keys committed before the backup
are duplicates there.

Examples
  dedup restore /backups/state-2025-01-31 ./state
  dedup restore ./old-state/snapshots ./state     # probabilistic only

Exit status
  0  restored
  1  SRC is not a backup or is damaged, SRC or DIR is in use, DIR is not empty, or an I/O error
  2  bad usage
`
