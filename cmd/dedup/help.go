package main

const filterHelpHead = `Usage: dedup filter [flags] [FILE...]

Reads events (NDJSON by default, or plain lines), writes each event whose
key was not seen within --window to the output, once, in input order.
Inputs are the FILEs and --in FILEs in order; none (or -) is stdin.

Keys
  --format json --key event_id        the raw JSON text of a member
  --format json --key user.id,seq     several members (dotted paths)
  --format lines                      the whole line
  --format lines --field 3 --delim ,  the 3rd comma-separated field
  --format lines --regex 'id=(\w+)'   the first group of a regexp

  A JSON key is the raw text of the value as it appears in the line: 1 and
  "1" are different keys, and so are "a" and "\u0061". A null value counts
  as missing. Several fields make one key of each value's length and text,
  so ("a,b","c") and ("a","b,c") differ.

Bad lines
  A line that is not a JSON object, lacks a key field, or has a key over
  --max-key bytes is rejected: it goes to --rejects (or stderr) as
  "FILE:LINE: REASON<TAB>LINE" and is counted. With --strict the first
  one stops the run with exit status 2 (the lines before it are done).

Exactly once, file to file
  With --state DIR, files as inputs and --out FILE, every commit records
  the input position and the output lengths with the keys. Killed at any
  moment (kill -9) and run again with the same command, dedup truncates
  the outputs to the committed lengths and resumes the input where the
  commit left it: the output holds every distinct event exactly once.
  A completed job run again reads only what was appended to its last
  input since. A different job (other inputs or outputs) starts from the
  beginning, with the same remembered keys; so does --from-start.

Examples
  # Distinct events of a stream, keys in memory.
  cat events.ndjson | dedup filter --key event_id > distinct.ndjson

  # Resumable, exactly once; duplicates and bad lines kept aside.
  dedup filter --state ./state --key user.id,seq \
      --in events.ndjson --out distinct.ndjson \
      --dups dups.ndjson --rejects rejects.txt --stats

  # Access log lines, keyed by request id, remembered for a day.
  dedup filter --format lines --regex 'req=([0-9a-f]+)' --window 24h \
      --state ./state access.log > access.dedup.log

  # Fast and approximate: about 0.1% of new events dropped, no store.
  dedup filter --probabilistic --fp 0.001 --key id big.ndjson > out.ndjson

Flags
`

const filterHelpTail = `
Exit status
  0  success
  1  runtime error (I/O, state directory, interrupted)
  2  bad usage, options that contradict the state directory, or a
     rejected line under --strict
`

const statsHelpHead = `Usage: dedup stats [flags] DIR

Prints what the state directory DIR holds: its generations, keys, filter
memory, disk size, and the last committed position of 'dedup filter'.
Pass the options the directory was created with (--window, --filter,
--probabilistic, --generations, --shards) if they differ from the defaults.

Example
  dedup stats ./state
  dedup stats --json --window 24h ./state | jq .checkpoint

Flags
`
