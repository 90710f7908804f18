package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// ErrNoProcMemory reports that a process's resident set cannot be read:
// /proc/PID/status is Linux's.
var ErrNoProcMemory = errors.New("bench: process memory needs Linux's /proc")

// ProcMemory is a process's resident set as the kernel reports it: what
// top, ps and the OOM killer see.
type ProcMemory struct {
	// RSS is the resident set now (VmRSS), in bytes.
	RSS uint64 `json:"rss"`
	// Peak is the largest resident set since the process started or its
	// peak was last reset (VmHWM), in bytes.
	Peak uint64 `json:"peak"`
}

// ReadProcMemory reads the resident set of process pid (0: this process)
// from /proc/PID/status.
func ReadProcMemory(pid int) (ProcMemory, error) {
	name := "/proc/self/status"
	if pid > 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) && runtime.GOOS != "linux" {
		return ProcMemory{}, ErrNoProcMemory
	}
	if err != nil {
		return ProcMemory{}, fmt.Errorf("bench: process memory: %w", err)
	}
	var m ProcMemory
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return m, fmt.Errorf("bench: %s: %s is %q, want a size in kB", name, k, v)
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("bench: %s: %s: %w", name, k, err)
		}
		if k == "VmRSS" {
			m.RSS = n << 10
		} else {
			m.Peak = n << 10
		}
		seen++
	}
	if seen != 2 {
		return m, fmt.Errorf("bench: %s has no VmRSS and VmHWM", name)
	}
	return m, nil
}

// resetPeak sets this process's peak resident set (VmHWM) to its current
// one, so that a later peak is that of the work since.
func resetPeak() error {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return fmt.Errorf("bench: reset peak RSS: %w", err)
	}
	return nil
}

// Machine says where and when a run was made: every report and chart
// carries it, since the figures of a shared machine move with its load.
type Machine struct {
	// CPU is the processor's model name; Cores the CPUs Go may use.
	CPU   string `json:"cpu"`
	Cores int    `json:"cores"`
	// OS, Arch and Go are runtime.GOOS, GOARCH and the Go version.
	OS   string `json:"os"`
	Arch string `json:"arch"`
	Go   string `json:"go"`
	// Started and Ended bound the run (UTC).
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// LoadStart and LoadEnd are the one-minute load averages at the
	// start and the end of the run (0 where /proc/loadavg is missing).
	LoadStart float64 `json:"load_start"`
	LoadEnd   float64 `json:"load_end"`
}

// StartMachine describes this machine at the start of a run.
func StartMachine() *Machine {
	return &Machine{
		CPU: cpuModel(), Cores: runtime.GOMAXPROCS(0),
		OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version(),
		Started: time.Now().UTC(), LoadStart: loadAverage(),
	}
}

// End records the end of the run.
func (m *Machine) End() {
	m.Ended, m.LoadEnd = time.Now().UTC(), loadAverage()
}

// String is one line for a report or a chart's caption.
func (m *Machine) String() string {
	s := fmt.Sprintf("%d cores of %s, %s/%s, %s; run %s",
		m.Cores, m.CPU, m.OS, m.Arch, m.Go, m.Started.Format("2006-01-02 15:04 UTC"))
	if m.LoadStart > 0 || m.LoadEnd > 0 {
		s += fmt.Sprintf(", load average %.1f at the start, %.1f at the end", m.LoadStart, m.LoadEnd)
	}
	return s
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "an unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "an unknown CPU"
}

func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
