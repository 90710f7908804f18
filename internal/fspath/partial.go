package fspath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// partialTag is what the name of a partial folder holds between the
// destination's name and the writer's process id.
const partialTag = ".partial-"

// Partial returns the path of a new hidden folder beside dest that a
// writer builds dest in before it renames it to dest once whole:
// DIR/.NAME.partial-PID-N, PID the writer's process id, N its clock. A
// writer killed mid-way leaves only this folder: [StalePartials] finds it.
func Partial(dest string) string {
	d := filepath.Clean(dest)
	return filepath.Join(filepath.Dir(d), fmt.Sprintf(".%s%s%d-%d", filepath.Base(d), partialTag, os.Getpid(), time.Now().UnixNano()))
}

// IsPartial reports whether the name of p is one [Partial] gives.
func IsPartial(p string) bool {
	_, _, ok := parsePartial(filepath.Base(filepath.Clean(p)))
	return ok
}

// parsePartial splits the base name of a partial folder into the name of
// its destination and its writer's process id.
func parsePartial(base string) (dest string, pid int, ok bool) {
	rest, ok := strings.CutPrefix(base, ".")
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndex(rest, partialTag)
	if i <= 0 {
		return "", 0, false
	}
	pidStr, _, ok := strings.Cut(rest[i+len(partialTag):], "-")
	if !ok {
		return "", 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	return rest[:i], pid, true
}

// StalePartials returns the partial folders of dest ([Partial]) beside it
// whose writer process is gone: what a writer killed mid-way left, safe to
// remove. A folder of a live process (this one included) is not listed.
func StalePartials(dest string) ([]string, error) {
	d := filepath.Clean(dest)
	parent, name := filepath.Dir(d), filepath.Base(d)
	ents, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range ents {
		n, pid, ok := parsePartial(de.Name())
		if !ok || n != name || !de.IsDir() || pid == os.Getpid() || !gone(pid) {
			continue
		}
		out = append(out, filepath.Join(parent, de.Name()))
	}
	return out, nil
}

// gone reports whether no process pid runs (it was reaped, or never was):
// only a definite answer counts, any other is taken as running.
func gone(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	err = p.Signal(syscall.Signal(0))
	return errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH)
}
