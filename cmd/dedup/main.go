package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
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

// command is one command of dedup, or a subcommand of one.
type command struct {
	name    string
	summary string
	// run runs the command on the arguments after its name.
	run func(e *env, args []string) error
	// flags builds the command's flag set; its Usage is the command's help,
	// which `dedup help NAME` prints.
	flags func(e *env) *flag.FlagSet
	// subs are the subcommands, for `dedup help NAME SUB`; run dispatches
	// to them itself.
	subs []command
}

// commands are dedup's commands, in the order the help lists them. A new
// command is one line here: its run function and its flag set.
var commands []command

// init fills commands, whose help command refers back to the table.
func init() {
	commands = []command{
		{"filter", "pass each distinct event through once (the stream filter)", runFilter, flagSetOf(newFilterFlags), nil},
		{"kafka", "deduplicate a Kafka topic as a consumer group, exactly once to an output topic", runKafka, flagSetOf(newKafkaFlags), nil},
		{"serve", "serve dedup over the Redis protocol (SET NX EX, BF.*, DEDUP.*)", runServe, flagSetOf(newServeFlags), nil},
		{"proxy", "put idempotency keys in front of any HTTP API (a reverse proxy that stores responses)", runProxy, flagSetOf(newProxyFlags), nil},
		{"stats", "print what a state directory holds", runStats, flagSetOf(newStatsFlags), nil},
		{"snapshot", "inspect, verify or rebuild the filter snapshots of a state", runSnapshot, newSnapshotFlags, snapshotSubs},
		{"backup", "copy a state directory (or a whole dedup serve state) consistently into a new directory", runBackup, flagSetOf(newBackupFlags), nil},
		{"restore", "install a backup (or a lone snapshot) into a new state directory", runRestore, newRestoreFlags, nil},
		{"check", "verify every block checksum of a state's store and its commit log", runCheck, newCheckFlags, nil},
		{"repair", "open a state that lost commits, accepting the loss (evidence kept)", runRepair, newRepairFlags, nil},
		{"help", "print help for dedup or a command", runHelp, newHelpFlags, nil},
	}
}

// findCommand returns the command of cmds called name, nil if none.
func findCommand(cmds []command, name string) *command {
	for i := range cmds {
		if cmds[i].name == name {
			return &cmds[i]
		}
	}
	return nil
}

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
	case "-version", "--version", "version":
		fmt.Fprintln(e.stdout, version())
		return exitOK
	}
	if c := findCommand(commands, name); c != nil {
		return status(e, c.run(e, args[1:]))
	}
	fmt.Fprintf(e.stderr, "dedup: unknown command %q\nRun 'dedup help' for the commands.\n", name)
	return exitBad
}

// version is the line --version prints: the module version (or "devel"
// for a build from a checkout), the commit built from and the Go release.
func version() string {
	v, rev, dirty := "devel", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		if dirty {
			rev += "+modified"
		}
		v += " (" + rev + ")"
	}
	return fmt.Sprintf("dedup %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
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
