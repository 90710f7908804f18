// Package stream is the stream filter of the dedup engine, the library
// behind `dedup filter`: it reads lines from files or a pipe, takes each
// line's key (a JSON member, a field, a regular expression's group),
// observes the keys with a [dedup.Engine], and writes each distinct event
// to its output once, duplicates and rejected lines aside.
//
// Expected usage: open the engine (with Options.MaxInFlight from
// [MaxInFlight] and Options.EventTime when [Config].Time names a field),
// then
//
//	f, err := stream.New(eng, cfg) // validates cfg, resolves the job, opens the files
//	if err != nil { ... }
//	err = f.Run()                  // reads to the end, committing as it goes
//	err = errors.Join(err, f.Close())
//	if err == nil {
//		err = f.Verdict()          // a run that rejected most of its lines fails
//	}
//	... eng.Close()
//
// With an engine over a state directory ([Config].State), the run is
// exactly once file to file and resumes after a crash, as below. Errors:
// [ErrUsage] marks a bad Config or a job the state contradicts,
// [ErrRejected] rejected lines that fail a run, [ErrInterrupted] a run
// stopped by [Config].Interrupt; a [Keyer] takes keys out of lines alone
// (dedup kafka's --key).
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
// names (Checkpoint.moveTo).
//
// # Source layout
//
// In the order a line goes through the filter:
//
//	filter.go        Config, Filter: New (setup and resume), Run, Close
//	input.go         reading inputs into batches of lines, in parallel
//	key.go           taking the key out of a line (Keyer)
//	jsonscan.go      the validating JSON scanner behind Keys.Key
//	eventtime.go     the event time of a line, and commits by event time
//	pipeline.go      reader -> engine -> writer, and where commits fall
//	output.go        the output streams and the rejects records
//	commit.go        do-then-mark commits, run in the background
//	checkpoint.go    the checkpoint committed with the keys
//	ident.go         an input's identity (inode, hash of its bytes), so
//	                 that a rotated input is not resumed into
//	locate.go        finding the committed position in a rotated log
//	verdict.go       the verdict on a run that rejected most of its lines
//	errors.go        the sentinels
package stream
