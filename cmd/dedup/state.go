package main

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/streamdedup/dedup"
)

// isState reports whether dir exists and holds something: a state to
// adopt options from (or a directory Open refuses), not a new one.
func isState(dir string) bool {
	ents, err := os.ReadDir(dir)
	return err == nil && len(ents) > 0
}

// adoptState reads the persisted options of the existing state directory
// dir into o (Window, Generations, Shards, Filter, Probabilistic) for every
// flag not in explicit; an explicit flag that contradicts the state is a
// usage error naming it. A new or empty directory leaves o as it is, and
// so does a directory that holds no dedup options (Open then decides).
func adoptState(dir string, explicit map[string]bool, o *dedup.Options) error {
	if !isState(dir) {
		return nil
	}
	have, err := dedup.StateOptions(dir)
	if errors.Is(err, dedup.ErrNotOurs) {
		return nil
	}
	if err != nil {
		return stateErr(dir, err)
	}
	return adoptOptions(dir, have, explicit, o)
}

// adoptOptions is adoptState with the state's options have already read.
func adoptOptions(dir string, have dedup.Options, explicit map[string]bool, o *dedup.Options) error {
	for _, p := range []struct {
		flag      string
		same      bool
		want, was string
		adopt     func()
	}{
		{"window", o.Window == have.Window, o.Window.String(), have.Window.String(), func() { o.Window = have.Window }},
		{"generations", o.Generations == have.Generations, strconv.Itoa(o.Generations), strconv.Itoa(have.Generations), func() { o.Generations = have.Generations }},
		{"shards", o.Shards == have.Shards, strconv.Itoa(o.Shards), strconv.Itoa(have.Shards), func() { o.Shards = have.Shards }},
		{"filter", o.Filter == have.Filter, o.Filter, have.Filter, func() { o.Filter = have.Filter }},
		{"probabilistic", o.Probabilistic == have.Probabilistic, strconv.FormatBool(o.Probabilistic), strconv.FormatBool(have.Probabilistic), func() { o.Probabilistic = have.Probabilistic }},
	} {
		if p.same {
			continue
		}
		if explicit[p.flag] {
			return usagef("--%s=%s contradicts the state directory %s, created with --%s=%s (omit the flag to adopt the state's value)",
				p.flag, p.want, dir, p.flag, p.was)
		}
		p.adopt()
	}
	// The state's sizing is adopted unless a flag sets it; a new value is
	// no contradiction (it sizes the generations made from now on, and
	// the engine records it).
	if !explicit["rate"] && have.ExpectedRate != 0 {
		o.ExpectedRate = have.ExpectedRate
	}
	if !explicit["fp"] && have.FalsePositiveRate != 0 {
		o.FalsePositiveRate = have.FalsePositiveRate
	}
	return nil
}

// stateErr words an error of opening the state directory dir, telling
// plainly when another process holds it (Pebble's LOCK file).
func stateErr(dir string, err error) error {
	if inUse(err) {
		return fmt.Errorf("state directory %s is in use by another process (its Pebble LOCK is held): stop that process first (%w)", dir, err)
	}
	return err
}

// inUse reports whether err is Pebble failing to take the directory lock:
// fcntl's EAGAIN/EACCES from another process, or Pebble's own message for
// this process. A permission problem creating LOCK is a *fs.PathError and
// does not count.
func inUse(err error) bool {
	if err == nil {
		return false
	}
	if strings.Contains(err.Error(), "lock held by current process") {
		return true
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return false
	}
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES)
}

// openErr maps an error of dedup.Open on dir to an exit status: options
// that are invalid or contradict the state are bad usage.
func openErr(dir string, err error) error {
	if errors.Is(err, dedup.ErrInvalidOptions) || errors.Is(err, dedup.ErrIncompatible) {
		return usageErr(err)
	}
	return stateErr(dir, err)
}

// engineLog returns a Logf that prints the engine's log lines (restore
// problems, rebuild progress) on e.stderr, one at a time.
func engineLog(e *env) func(format string, args ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		// The engine's messages name it already ("dedup: ...").
		msg := strings.TrimPrefix(strings.TrimRight(fmt.Sprintf(format, args...), "\n"), "dedup: ")
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(e.stderr, "dedup: engine: %s\n", msg)
	}
}

// Snapshot file names, as the snapshot package writes them.
const (
	manifestPrefix = "snapshot-"
	manifestSuffix = ".manifest"
)

// findManifests resolves PATH for the snapshot commands: a manifest file
// is itself; a folder of snapshots, or a state directory (its snapshots
// folder), gives its manifests, newest first.
func findManifests(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	dir := path
	if sub := filepath.Join(path, dedup.SnapshotDir); isDir(sub) {
		dir = sub
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type m struct {
		seq  uint64
		name string
	}
	var ms []m
	for _, ent := range ents {
		s, ok := strings.CutPrefix(ent.Name(), manifestPrefix)
		if !ok {
			continue
		}
		if s, ok = strings.CutSuffix(s, manifestSuffix); !ok {
			continue
		}
		seq, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			continue
		}
		ms = append(ms, m{seq, ent.Name()})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no snapshot in %s (no %s*%s file)", dir, manifestPrefix, manifestSuffix)
	}
	slices.SortFunc(ms, func(a, b m) int { return cmp.Compare(b.seq, a.seq) })
	out := make([]string, len(ms))
	for i, x := range ms {
		out[i] = filepath.Join(dir, x.name)
	}
	return out, nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// dirSize sums the sizes of the regular files under dir.
func dirSize(dir string) (uint64, error) {
	var n uint64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += uint64(fi.Size())
		}
		return nil
	})
	return n, err
}

// describeOptions formats the persisted options of a state for people.
func describeOptions(o dedup.Options) string {
	mode := "exact"
	if o.Probabilistic {
		mode = "probabilistic"
	}
	return fmt.Sprintf("window %v, %d generations, %d shards, %s filter, %s", o.Window, o.Generations, o.Shards, o.Filter, mode)
}
