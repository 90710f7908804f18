package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/streamdedup/dedup"
)

// Exit statuses.
const (
	exitOK      = 0 // success
	exitRuntime = 1 // runtime error: I/O, state directory, engine
	exitBad     = 2 // bad usage, or a bad input line under --strict
)

// env is the process environment a command runs in; tests substitute it.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// stderrTTY reports whether stderr is a terminal (progress bars).
	stderrTTY bool
	// sigs, when non-nil, interrupts the run (SIGINT, SIGTERM).
	sigs <-chan os.Signal
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(e *env, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"filter", "pass each distinct event through once (the stream filter)", runFilter},
		{"stats", "print what a state directory holds", runStats},
		{"snapshot", "inspect, verify or rebuild the filter snapshots of a state", runSnapshot},
		{"backup", "copy a state directory consistently into a new directory", runBackup},
		{"restore", "install a backup (or a lone snapshot) into a new state directory", runRestore},
		{"help", "print help for dedup or a command", runHelp},
	}
}

// engineDefaults are the engine's option defaults: the flags that mirror
// options show them, so the command never drifts from the library.
var engineDefaults = *(&dedup.Options{}).EnsureDefaults()

// exitError carries an exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr marks err as bad usage (exit status 2).
func usageErr(err error) error { return &exitError{code: exitBad, err: err} }

// usagef is usageErr of a formatted message.
func usagef(format string, args ...any) error { return usageErr(fmt.Errorf(format, args...)) }

func main() {
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, stderrTTY: isTerminal(os.Stderr)}
	e.sigs = notifySignals()
	os.Exit(run(e, os.Args[1:]))
}

// notifySignals delivers SIGINT and SIGTERM: the run commits what it has
// written and stops.
func notifySignals() <-chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return c
}

// run dispatches args to a subcommand and returns the exit status.
func run(e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, mainHelp())
		return exitBad
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		fmt.Fprint(e.stdout, mainHelp())
		return exitOK
	}
	for _, c := range commands {
		if c.name == name {
			return status(e, c.run(e, args[1:]))
		}
	}
	fmt.Fprintf(e.stderr, "dedup: unknown command %q\n\n%s", name, mainHelp())
	return exitBad
}

// status prints err and maps it to an exit status.
func status(e *env, err error) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	code := exitRuntime
	var xe *exitError
	if errors.As(err, &xe) {
		code = xe.code
	}
	// The engine's errors begin with "dedup: " already.
	fmt.Fprintf(e.stderr, "dedup: %s\n", strings.TrimPrefix(err.Error(), "dedup: "))
	return code
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func runHelp(e *env, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stdout, mainHelp())
		return nil
	}
	var fs *flag.FlagSet
	switch args[0] {
	case "filter":
		fs, _ = newFilterFlags(e)
	case "stats":
		fs, _ = newStatsFlags(e)
	case "backup":
		fs = newBackupFlags(e)
	case "restore":
		fs = newRestoreFlags(e)
	case "snapshot":
		if len(args) == 1 {
			fmt.Fprint(e.stdout, snapshotHelp)
			return nil
		}
		for _, s := range snapshotSubs {
			if s.name == args[1] {
				fs = s.flags(e)
			}
		}
		if fs == nil {
			return usagef("help: unknown command %q", strings.Join(args, " "))
		}
	case "help":
		fmt.Fprint(e.stdout, mainHelp())
		return nil
	default:
		return usagef("help: unknown command %q", args[0])
	}
	fs.SetOutput(e.stdout)
	fs.Usage()
	return nil
}

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

// parseInterspersed parses flags and positional arguments in any order
// ("dedup filter a.ndjson --key id"), returning the positionals. "--"
// ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at "--" (consumed) or at the first positional; tell
		// them apart by what preceded rest.
		consumed := args[:len(args)-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

// Set appends one value.
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}
