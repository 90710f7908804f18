package bench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

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
