package main

import (
	"flag"
	"fmt"
	"strings"
)

// runHelp prints the help of the command named by args (a command and
// its subcommand, for one with subcommands), or dedup's help.
func runHelp(e *env, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stdout, mainHelp())
		return nil
	}
	cmds := commands
	var c *command
	for i, name := range args {
		if c = findCommand(cmds, name); c == nil {
			return usagef("help: unknown command %q", strings.Join(args[:i+1], " "))
		}
		if c.subs == nil || i == len(args)-1 {
			break
		}
		cmds = c.subs
	}
	fs := c.flags(e)
	fs.SetOutput(e.stdout)
	fs.Usage()
	return nil
}

// newHelpFlags is the flag set of `dedup help`, which has no flags: its
// Usage prints dedup's help.
func newHelpFlags(e *env) *flag.FlagSet { return newFlags(e, "dedup help", mainHelp(), "") }

// mainHelp is dedup's help: what it is, its commands, examples and exit
// statuses.
func mainHelp() string {
	var b strings.Builder
	b.WriteString(`dedup removes duplicate events from streams: each distinct key passes once
within a time window, and the state survives restarts.

Usage:
  dedup <command> [flags] [args]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	b.WriteString(`
Examples:
  # Drop repeated event_ids from an NDJSON stream (state in memory).
  cat events.ndjson | dedup filter --key event_id > distinct.ndjson

  # Exactly once, file to file, resumable after a crash: run it again.
  dedup filter --state ./state --key user.id,seq --in events.ndjson --out distinct.ndjson

  # What does the state directory hold? (no need to repeat its flags)
  dedup stats ./state

  # Resume later: the state's window, filter and mode are adopted from it.
  dedup filter --state ./state --key user.id,seq --in more.ndjson --out more.distinct.ndjson

  # Snapshots: what they hold, whether they are sound, a fresh one from the store.
  dedup snapshot inspect ./state
  dedup snapshot verify ./state
  dedup snapshot rebuild ./state

  # Back up a state (not in use), and restore it into a new directory.
  dedup backup ./state /backups/state-1
  dedup restore /backups/state-1 ./state2

Run 'dedup help <command>' (or 'dedup <command> -h') for the flags.

Exit status: 0 success; 1 runtime error (I/O, state directory, a state in
use by another process, an invalid snapshot for 'snapshot verify'); 2 bad
usage, options that contradict the state directory, or a bad input line
under --strict.
`)
	return b.String()
}
