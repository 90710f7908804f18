// Command dedup is the stream filter of the dedup engine: it passes each
// distinct event of a stream through once, remembering keys within a time
// window in a state directory that survives restarts.
//
// Usage:
//
//	dedup filter [flags] [FILE...]     the stream filter (package stream)
//	dedup kafka [flags]                deduplicate a Kafka topic, exactly once to an output topic
//	dedup serve [flags]                serve dedup over the Redis protocol (SET NX EX, BF.*, DEDUP.*)
//	dedup proxy [flags]                idempotency keys in front of an HTTP API (a reverse proxy)
//	dedup stats [flags] DIR            what a state directory holds
//	dedup snapshot inspect [flags] PATH  generations, counts, fill, FP, sizes of a snapshot
//	dedup snapshot verify [flags] PATH   check every checksum and filter (exit 0 valid, 1 invalid)
//	dedup snapshot rebuild DIR         rebuild an exact state's filters from its store, snapshot them
//	dedup backup DIR DEST              consistent copy of a state into a new directory
//	dedup restore SRC DIR              install a backup (or a probabilistic state's lone snapshot)
//	dedup check DIR                    verify every block checksum of a state's store and its commit log
//	dedup repair DIR                   open a state that lost commits, accepting the loss (evidence kept)
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
// # Exactly once, file to file
//
// The stream filter itself, its keys, its commits and its checkpoint, is
// package github.com/streamdedup/dedup/stream: `go doc ./stream`.
//
// # Source layout
//
// The commands, one file each, listed in the command table of main.go
// (one line per command: its run function and its flag set):
//
//	cmd_filter.go    dedup filter: its flags, around stream.Filter
//	cmd_kafka.go     dedup kafka (package kafka)
//	cmd_serve.go     dedup serve (package resp)
//	cmd_proxy.go     dedup proxy (package idempotency)
//	cmd_stats.go     dedup stats
//	cmd_snapshot.go  dedup snapshot inspect, verify and rebuild
//	cmd_backup.go    dedup backup and dedup restore
//	cmd_check.go     dedup check
//	cmd_repair.go    dedup repair
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
//	progress.go      dedup filter's progress bar
//	metrics.go       the Prometheus metrics of --metrics
//	report.go        dedup filter's --stats summary at the end of a run
package main
