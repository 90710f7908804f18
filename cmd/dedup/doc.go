// Command dedup is the stream filter of the dedup engine: it passes each
// distinct event of a stream through once, remembering keys within a time
// window in a state directory that survives restarts.
//
// Usage:
//
//	dedup filter [flags] [FILE...]     the stream filter
//	dedup stats [flags] DIR            what a state directory holds
//	dedup snapshot inspect [flags] PATH  generations, counts, fill, FP, sizes of a snapshot
//	dedup snapshot verify [flags] PATH   check every checksum and filter (exit 0 valid, 1 invalid)
//	dedup snapshot rebuild DIR         rebuild an exact state's filters from its store, snapshot them
//	dedup backup DIR DEST              consistent copy of a state into a new directory
//	dedup restore SRC DIR              install a backup (or a probabilistic state's lone snapshot)
//	dedup help [command [subcommand]]
//
// Run `dedup help <command>` for the flags and examples. Exit statuses: 0
// success; 1 runtime error (I/O, a state directory missing, damaged or in
// use by another process, an invalid snapshot under `snapshot verify`); 2
// bad usage, flags that contradict the state directory, or a bad line
// under --strict.
//
// # State directory
//
// A state directory persists the options that shape it (window,
// generations, shards, filter, probabilistic mode). The commands read them
// with dedup.StateOptions: `dedup filter --state DIR` adopts each one whose
// flag was not given (flag.Visit) and refuses, with exit status 2, a flag
// given with another value; stats, backup and rebuild need no flag at all.
// The engine holds Pebble's LOCK file on the directory, so one process uses
// a state at a time; a command that finds it held says so.
//
// # Snapshots
//
// With --state, `dedup filter` passes --snapshot-interval (1m) to the
// engine, which snapshots the filters into DIR/snapshots periodically and
// at Close (with 0, the command snapshots once at the end of the run), so
// a restart loads them instead of rebuilding from the store. Problems the
// engine meets restoring them are logged on stderr ("dedup: engine: ...").
// `dedup snapshot inspect` and `verify` take a manifest file, a snapshots
// folder or a state directory; they read files only and work on a state in
// use. verify reads every segment through snapshot.Read (all checksums)
// and decodes every payload with filter.Unmarshal, checking its kind and
// count against the manifest; inspect does the same to report capacity,
// fill and estimated false-positive rates (--quick: headers only).
//
// # Keys
//
// NDJSON keys (--key a.b,c) are the raw JSON text of the named members, so
// 1 and "1" differ; a null member counts as missing. A composite key is,
// per field in --key order, uvarint(len(value)) followed by the value, so
// that no two field tuples make the same key. Lines keys (--format lines)
// are the whole line, a --field of --delim separated fields, or the first
// group of --regex; a trailing "\r" is not part of the key.
//
// # Exactly once, file to file
//
// The filter reads a batch of lines, observes their keys with one
// ObserveBatch, writes New events to the output and Duplicate and InFlight
// ones to --dups (InFlight is a repeat of a key written since the last
// commit), and every --commit-every events or --commit-interval commits:
//
//  1. flush and fsync the output, --dups and --rejects files (do);
//  2. Engine.Commit(checkpoint) with the input position just past the last
//     line written and the output lengths (mark).
//
// On start with --state, if the engine's Checkpoint names the same job
// (the same absolute input and output paths), the outputs are truncated to
// the committed lengths and the input is read from the committed offset.
// A crash between (1) and (2), or anywhere else, leaves output past the
// committed length whose keys were not committed: they are New again when
// their lines are read again, so truncating that output and re-reading
// writes each distinct event exactly once. The input and the outputs must
// not be changed by others between runs: the checkpoint records the
// input's inode and a hash of its bytes before the offset, and an input
// rotated or rewritten since, or shorter, is an error naming the way out.
// A rotated log is read whole by listing the rotated file first, --in
// app.log.1 --in app.log: the run finds the file holding the committed
// position among the inputs (by its inode, or a copy by its bytes), reads
// its tail from there and the inputs after it from their start (locate.go).
// The position stays at the end of the last input when it is done, so
// running the same command after that input grew reads only what was
// appended; a last line without a newline there is not consumed, since
// its writer may not have finished it (on stdin, the end of the input
// ends the line). With stdin as input the position cannot be resumed;
// with stdout as output it cannot be truncated, so a crash may repeat the
// events written after the last commit (at-least-once).
//
// A run that is not the state's job (other inputs, stdin, --from-start)
// reads its inputs from the start and continues the state's output files
// from their committed lengths: their events are remembered, so
// truncating them would lose those events for good. Inputs that differ
// from the state's job without --from-start, and existing files that are
// not the state's outputs, are refused unless --overwrite.
//
// # Checkpoint
//
// The checkpoint is JSON:
//
//	{"format":"dedup-filter/1",
//	 "inputs":["/abs/a.ndjson",...], "out":"/abs/out.ndjson", "dups":"...", "rejects":"...",
//	 "state":"/abs/state", "file":1, "offset":1234, "line":57, "ino":1835, "dev":2049, "sum":"9f2c...",
//	 "read":[{"ino":1834,"offset":52011,"sum":"0b61..."}],
//	 "out_len":900, "dups_len":120, "rejects_len":0,
//	 "counts":{"events":56,"distinct":40,"duplicates":14,"rejects":2,"bytes":1234}}
//
// inputs, out, dups and rejects identify the job ("-" is stdin or stdout);
// inputs[file] has been consumed up to byte offset, the start of line
// number line; ino and dev identify that file, sum is a hash of its first
// and last 4 KiB before offset (absent for stdin); read has the same of
// each input before file, when it was read to its end. The lengths
// are those of the output files at the commit, and counts the job's
// counters up to the position. state is the state directory's path at the
// commit: a state found at another path (restored elsewhere) takes each
// file of the job at the same place relative to it as the one the run
// names (checkpoint.moveTo).
//
// # Source layout
//
// The commands, one file each, listed in the command table of main.go
// (one line per command: its run function and its flag set):
//
//	cmd_filter.go    dedup filter: its flags, filterRun, setup and resume
//	cmd_stats.go     dedup stats
//	cmd_snapshot.go  dedup snapshot inspect, verify and rebuild
//	cmd_backup.go    dedup backup and dedup restore
//	cmd_help.go      dedup help, and dedup's own help text
//	usage.go         the help text of each command
//
// Shared by the commands:
//
//	main.go          env, exit statuses, the command table, dispatch
//	flags.go         flag sets, positional arguments, interspersed flags
//	engineflags.go   --window, --rate, --fp, --filter, --probabilistic,
//	                 --generations, --shards: one registration for every
//	                 command that opens an engine
//	state.go         state directories: adopting their options, lock and
//	                 open errors, snapshot files, sizes
//
// The stream filter, in the order a line goes through it:
//
//	input.go         reading inputs into batches of lines, in parallel
//	key.go           taking the key out of a line (--key, --field, --regex)
//	jsonscan.go      the validating JSON scanner behind --key
//	pipeline.go      reader -> engine -> writer, and where commits fall
//	output.go        the output streams and the rejects records
//	commit.go        do-then-mark commits, run in the background
//	checkpoint.go    the checkpoint committed with the keys
//	ident.go         an input's identity (inode, hash of its bytes), so
//	                 that a rotated input is not resumed into
//	locate.go        finding the committed position in a rotated log
//	progress.go      the progress bar
//	metrics.go       the Prometheus metrics of --metrics
//	report.go        the --stats summary at the end of a run, and the
//	                 verdict on a run that rejected most of its lines
package main
