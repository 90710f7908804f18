package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// newFlags returns the flag set of the command name ("dedup stats"): its
// errors go to e.stderr, and its Usage prints head, the flags, then tail.
func newFlags(e *env, name, head, tail string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
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

// flagArgs parses fs and returns the positional arguments; a parse error
// is bad usage.
func flagArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageErr(err)
	}
	return pos, nil
}

// positionals parses fs and returns its n positional arguments; another
// count is bad usage, worded "stats: want WANT, got 3 arguments".
func positionals(fs *flag.FlagSet, args []string, n int, want string) ([]string, error) {
	pos, err := flagArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) != n {
		return nil, usagef("%s: want %s, got %d arguments", strings.TrimPrefix(fs.Name(), "dedup "), want, len(pos))
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
