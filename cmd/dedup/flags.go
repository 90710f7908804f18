package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
)

// newFlags returns the flag set of the command name ("dedup stats"): its
// Usage prints head, the flags, then tail, on e.stdout (asked for with -h;
// `dedup help` prints it too). A bad flag prints no help: flagArgs words
// the error with a one-line hint.
func newFlags(e *env, name, head, tail string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stdout)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), head)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), tail)
	}
	return fs
}

// flagSetOf adapts a constructor of a flag set and its config to the
// command table, which needs the flag set alone (for `dedup help`).
func flagSetOf[C any](newFlags func(e *env) (*flag.FlagSet, C)) func(e *env) *flag.FlagSet {
	return func(e *env) *flag.FlagSet {
		fs, _ := newFlags(e)
		return fs
	}
}

// flagArgs parses fs and returns the positional arguments. -h prints the
// help and returns flag.ErrHelp; a bad flag is bad usage, worded as the
// error and a hint at the help, not the whole help.
func flagArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	if err := flagArgsTo(fs, args, func(a string) { pos = append(pos, a) }); err != nil {
		return nil, err
	}
	return pos, nil
}

// flagArgsTo is flagArgs handing each positional argument to sink as it
// is met, after the flags before it were set: a repeatable flag and the
// positionals sharing one list keep the order of the command line.
func flagArgsTo(fs *flag.FlagSet, args []string, sink func(string)) error {
	out := fs.Output()
	fs.SetOutput(io.Discard) // the flag package's own message and help
	err := parseInterspersed(fs, args, sink)
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return err
		}
		return usageErr(fmt.Errorf("%s: %w%s", strings.TrimPrefix(fs.Name(), "dedup "), err, helpHint(fs)))
	}
	return nil
}

// helpHint is the line that follows a usage error of the command of fs.
func helpHint(fs *flag.FlagSet) string {
	return fmt.Sprintf("\nRun '%s' for usage.", strings.Replace(fs.Name(), "dedup ", "dedup help ", 1))
}

// positionals parses fs and returns its n positional arguments; another
// count is bad usage, worded "stats: want WANT, got 3 arguments".
func positionals(fs *flag.FlagSet, args []string, n int, want string) ([]string, error) {
	pos, err := flagArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) != n {
		got := fmt.Sprintf("%d arguments", len(pos))
		if len(pos) == 1 {
			got = fmt.Sprintf("1 argument (%q)", pos[0])
		}
		return nil, usagef("%s: want %s, got %s%s", strings.TrimPrefix(fs.Name(), "dedup "), want, got, helpHint(fs))
	}
	return pos, nil
}

// explicitFlags returns the names of the flags set on the command line.
func explicitFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// parseInterspersed parses flags and positional arguments in any order
// ("dedup filter a.ndjson --key id"), handing the positionals to sink in
// order. "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string, sink func(string)) error {
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return nil
		}
		// flag stops at "--" (consumed) or at the first positional; tell
		// them apart by what preceded rest.
		consumed := args[:len(args)-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			for _, a := range rest {
				sink(a)
			}
			return nil
		}
		sink(rest[0])
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

// checkAddr checks the HOST:PORT value addr of the flag fl (a listen
// address) before anything is opened: a malformed one, or a host that does
// not resolve, is bad usage naming the flag, unlike a port in use, which
// only listening finds.
func checkAddr(fl, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err == nil && host != "" && net.ParseIP(host) == nil {
		_, err = net.LookupHost(host)
	}
	if err != nil {
		return usagef("%s %q: want HOST:PORT, e.g. 127.0.0.1:9090: %w", fl, addr, err)
	}
	return nil
}
