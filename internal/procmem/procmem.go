// Package procmem reads a process's resident memory as the kernel reports
// it: what top, ps and the OOM killer see. [Read] takes the resident set
// now and its peak from Linux's /proc/PID/status, [ResetPeak] restarts this
// process's peak, and [ChildPeak] gives the peak of a finished child from
// its resource usage (Unix).
//
// Outside Linux, Read and ResetPeak return an error wrapping
// [ErrUnsupported]; ChildPeak returns 0 where the kernel does not report a
// peak.
package procmem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// ErrUnsupported reports that process memory cannot be read here:
// /proc/PID/status is Linux's.
var ErrUnsupported = errors.New("procmem: process memory needs Linux's /proc")

// Memory is a process's resident set, in bytes.
type Memory struct {
	// RSS is the resident set now (VmRSS).
	RSS uint64
	// Peak is the largest resident set since the process started or its
	// peak was last reset with [ResetPeak] (VmHWM).
	Peak uint64
}

// Read reads the resident set of process pid (0: this process) from
// /proc/PID/status.
func Read(pid int) (Memory, error) {
	name := "/proc/self/status"
	if pid > 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) && runtime.GOOS != "linux" {
		return Memory{}, ErrUnsupported
	}
	if err != nil {
		return Memory{}, fmt.Errorf("procmem: %w", err)
	}
	return parseStatus(name, b)
}

// parseStatus takes VmRSS and VmHWM from the text of a /proc/PID/status
// file; name is the file's, for errors.
func parseStatus(name string, b []byte) (Memory, error) {
	var m Memory
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("procmem: %s: %s is %q, want a size in kB", name, k, strings.TrimSpace(v))
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("procmem: %s: %s: %w", name, k, err)
		}
		if k == "VmRSS" {
			m.RSS = n << 10
		} else {
			m.Peak = n << 10
		}
		seen++
	}
	if err := sc.Err(); err != nil {
		return Memory{}, fmt.Errorf("procmem: %s: %w", name, err)
	}
	if seen != 2 {
		return Memory{}, fmt.Errorf("procmem: %s has no VmRSS and VmHWM", name)
	}
	return m, nil
}

// ResetPeak sets this process's peak resident set (VmHWM) to its current
// one, so that a later peak is that of the work since.
func ResetPeak() error {
	err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	if errors.Is(err, os.ErrNotExist) && runtime.GOOS != "linux" {
		return ErrUnsupported
	}
	if err != nil {
		return fmt.Errorf("procmem: reset peak: %w", err)
	}
	return nil
}
