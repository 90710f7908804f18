package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// ChildJob is one target of a [Compare] run, handed to a fresh process
// ([RunChild]) so that the process's resident set is the target's alone.
type ChildJob struct {
	// Config is the comparison's.
	Config CompareConfig `json:"config"`
	// Mode and Filter name an engine target; Baseline a baseline.
	Mode     string `json:"mode,omitempty"`
	Filter   string `json:"filter,omitempty"`
	Baseline string `json:"baseline,omitempty"`
	// ScaleTarget and ScaleKeys make the job a memory-at-scale run: the
	// target ("MODE/FILTER" or a baseline) takes ScaleKeys distinct keys.
	ScaleTarget string `json:"scale_target,omitempty"`
	ScaleKeys   int    `json:"scale_keys,omitempty"`
}

// The memory-at-scale runs spread their keys over scaleSpan of a window
// of scaleWindow on the virtual clock, so that every key is held at the
// end and each generation gets its share.
const (
	scaleWindow = time.Hour
	scaleSpan   = 0.9
)

func (j ChildJob) baseline() string {
	if j.ScaleTarget != "" {
		_, _, b, _ := parseScaleTarget(j.ScaleTarget)
		return b
	}
	return j.Baseline
}

func (j ChildJob) name() string {
	switch {
	case j.ScaleTarget != "":
		return j.ScaleTarget
	case j.Baseline != "":
		return j.Baseline
	}
	return j.Mode + "/" + j.Filter
}

// parseScaleTarget splits "MODE/FILTER" or a baseline name.
func parseScaleTarget(s string) (mode, filter, baseline string, err error) {
	if m, f, ok := strings.Cut(s, "/"); ok {
		if m != "exact" && m != "probabilistic" || f == "" {
			return "", "", "", fmt.Errorf("bench: memory-at-scale target %q: want exact/FILTER, probabilistic/FILTER or a baseline", s)
		}
		return m, f, "", nil
	}
	if !slices.Contains([]string{BaselineRedis, BaselinePebble, BaselineMap, BaselineBloom, BaselineSBBF}, s) {
		return "", "", "", fmt.Errorf("bench: memory-at-scale target %q: want exact/FILTER, probabilistic/FILTER or redis, pebble, map, bloom", s)
	}
	return "", "", s, nil
}

// RunChild reads a [ChildJob] as JSON from r, runs it in this process and
// writes its [CompareRow] as JSON to w. [CompareConfig.Child] names a
// command that calls it (cmd/dedupbench's hidden "child" subcommand).
func RunChild(ctx context.Context, r io.Reader, w io.Writer) error {
	var j ChildJob
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("bench: child job: %w", err)
	}
	j.Config.Child = nil
	row, err := j.run(ctx, nil, true, nil)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(w).Encode(row); err != nil {
		return fmt.Errorf("bench: child result: %w", err)
	}
	return nil
}

// runChild runs j in a fresh process started by the command line cmd.
func runChild(ctx context.Context, cmd []string, j ChildJob) (CompareRow, error) {
	if len(cmd) == 0 {
		return CompareRow{}, errors.New("bench: empty child command")
	}
	in, err := json.Marshal(j)
	if err != nil {
		return CompareRow{}, fmt.Errorf("bench: child job: %w", err)
	}
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return CompareRow{}, fmt.Errorf("bench: child process for %s: %w: %s", j.name(), err, strings.TrimSpace(stderr.String()))
	}
	var row CompareRow
	if err := json.Unmarshal(out, &row); err != nil {
		return row, fmt.Errorf("bench: child process for %s printed %q: %w", j.name(), out, err)
	}
	return row, nil
}

// runScale feeds t n distinct keys (no duplicates) spread over one window,
// in batches, and measures what the process holds for them.
func runScale(ctx context.Context, cfg CompareConfig, n int, window time.Duration, rate float64, t Target, clk *VirtualClock, probe memProbe, progress Progress) (row CompareRow, err error) {
	row.Name, row.ScaleKeys = t.Name(), n
	progress = orNop(progress)
	progress.Stage(fmt.Sprintf("memory at %d keys: %s", n, row.Name), int64(n))
	st, err := NewStream(StreamOptions{Seed: cfg.Stream.Seed, Rate: rate, DuplicateFraction: 1e-9, Keys: cfg.Stream.Keys, Events: int64(n)})
	if err != nil {
		return row, err
	}
	batch := cfg.Batch
	keys := make([][]byte, 0, batch)
	dup := make([]bool, batch)
	var ev Event
	var at time.Duration
	calls := 0
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		if clk != nil {
			clk.Set(at)
		}
		if err := t.Check(keys, simEpoch.Add(at), dup[:len(keys)]); err != nil {
			return fmt.Errorf("bench: %s: %w", row.Name, err)
		}
		progress.Add(int64(len(keys)))
		row.Events += uint64(len(keys))
		keys = keys[:0]
		// The engine commits every 64 calls, about a second of its
		// throughput, as an AutoCommit would.
		if calls++; calls%64 == 0 {
			if et, ok := t.(*EngineTarget); ok {
				return et.Commit()
			}
		}
		return nil
	}
	start := time.Now()
	for st.Next(&ev) {
		if len(keys) == 0 {
			if ctx.Err() != nil {
				return row, fmt.Errorf("bench: memory at scale: %w", ctx.Err())
			}
			at = ev.At
		}
		keys = append(keys, ev.Key)
		if len(keys) == batch {
			if err := flush(); err != nil {
				return row, err
			}
		}
	}
	if err := flush(); err != nil {
		return row, err
	}
	row.Elapsed = time.Since(start)
	row.EventsPerSec = float64(row.Events) / row.Elapsed.Seconds()
	return row, usage(t, &row, probe)
}
