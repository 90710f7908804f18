package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/internal/procmem"
)

// FilterCmdConfig configures [FilterCmd]: `dedup filter` with its keys in
// memory against awk's `!seen[key]++`, the line-dedup idiom, on one NDJSON
// file, each a process of its own whose peak resident set the kernel
// reports.
type FilterCmdConfig struct {
	// Lines is the number of NDJSON lines. Default 1,000,000.
	Lines int `json:"lines"`
	// Stream shapes the keys and duplicates. Default 5% duplicates,
	// exponential delay with mean 1s at 50,000 lines/s, mixed keys.
	Stream StreamOptions `json:"stream"`
	// Dedup is the dedup binary. Default "dedup" on the PATH.
	Dedup string `json:"dedup"`
	// Awk is the awk binary. Default "awk" on the PATH.
	Awk string `json:"awk"`
	// Dir is where the input and outputs are written ("" = os.TempDir).
	Dir string `json:"dir,omitempty"`
}

// FilterCmdRow is one tool's run.
type FilterCmdRow struct {
	Tool    string        `json:"tool"`
	Command string        `json:"command"`
	Elapsed time.Duration `json:"elapsed"`
	// LinesOut is the number of lines the tool kept.
	LinesOut int `json:"lines_out"`
	// PeakRSS is the process's largest resident set (getrusage's
	// ru_maxrss), bytes; PeakPerKey that per distinct key.
	PeakRSS    uint64  `json:"peak_rss"`
	PeakPerKey float64 `json:"peak_per_key"`
}

// FilterCmdResult is the outcome of [FilterCmd].
type FilterCmdResult struct {
	Config   FilterCmdConfig `json:"config"`
	Bytes    int64           `json:"input_bytes"`
	Distinct int             `json:"distinct_keys"`
	Rows     []FilterCmdRow  `json:"rows"`
	Machine  *Machine        `json:"machine,omitempty"`
}

// awkFS and awkProgram keep the first line of each event_id, as
// `awk '!seen[$0]++'` keeps the first of each line.
const (
	awkFS      = `-F"event_id":"`
	awkProgram = `{ split($2, a, "\""); if (!seen[a[1]]++) print }`
)

// FilterCmd writes the NDJSON file, runs both tools on it in turn and
// checks that they keep the same lines.
func FilterCmd(ctx context.Context, cfg FilterCmdConfig) (res *FilterCmdResult, err error) {
	if cfg.Lines == 0 {
		cfg.Lines = 1_000_000
	}
	if cfg.Lines < 1 {
		return nil, fmt.Errorf("bench: filter run of %d lines: want at least one", cfg.Lines)
	}
	s := &cfg.Stream
	s.ensureCompareDefaults()
	s.Events = int64(cfg.Lines)
	if cfg.Dedup == "" {
		cfg.Dedup = "dedup"
	}
	if cfg.Awk == "" {
		cfg.Awk = "awk"
	}
	dedupBin, err := exec.LookPath(cfg.Dedup)
	if err != nil {
		return nil, fmt.Errorf("bench: %s not found (go install ./cmd/dedup, or pass its path): %w", cfg.Dedup, err)
	}
	awkBin, err := exec.LookPath(cfg.Awk)
	if err != nil {
		return nil, fmt.Errorf("bench: %s not found: %w", cfg.Awk, err)
	}
	awkName := filepath.Base(awkBin)
	if real, err := filepath.EvalSymlinks(awkBin); err == nil {
		awkName = filepath.Base(real) // awk is gawk or mawk behind a link
	}
	dir, err := os.MkdirTemp(cfg.Dir, "dedupbench-filter-")
	if err != nil {
		return nil, fmt.Errorf("bench: filter dir: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	res = &FilterCmdResult{Config: cfg, Machine: StartMachine()}
	defer res.Machine.End()
	in := filepath.Join(dir, "events.ndjson")
	if res.Bytes, res.Distinct, err = writeNDJSON(in, *s); err != nil {
		return res, err
	}
	for _, t := range []struct {
		tool string
		args []string
	}{
		{"dedup filter (keys in memory)", []string{dedupBin, "filter", "--key", "event_id"}},
		{"awk !seen[key]++ (" + awkName + ")", []string{awkBin, awkFS, awkProgram}},
	} {
		row, err := runFilterTool(ctx, t.tool, t.args, in, filepath.Join(dir, "out"))
		if err != nil {
			return res, err
		}
		if res.Distinct > 0 {
			row.PeakPerKey = float64(row.PeakRSS) / float64(res.Distinct)
		}
		res.Rows = append(res.Rows, row)
	}
	if a, b := res.Rows[0].LinesOut, res.Rows[1].LinesOut; a != b || a != res.Distinct {
		return res, fmt.Errorf("bench: dedup kept %d lines, awk %d, of %d distinct events", a, b, res.Distinct)
	}
	return res, nil
}

// writeNDJSON writes the stream as clickstream events, one per line, and
// returns the file's size and the number of distinct keys.
func writeNDJSON(name string, sc StreamOptions) (int64, int, error) {
	st, err := NewStream(sc)
	if err != nil {
		return 0, 0, err
	}
	f, err := os.Create(name)
	if err != nil {
		return 0, 0, fmt.Errorf("bench: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var ev Event
	distinct := 0
	line := make([]byte, 0, 256)
	for i := 0; st.Next(&ev); i++ {
		if !ev.Dup {
			distinct++
		}
		line = append(line[:0], `{"event_id":"`...)
		line = append(line, ev.Key...)
		line = append(line, `","ts":`...)
		line = strconv.AppendInt(line, simEpoch.Add(ev.At).UnixMilli(), 10)
		line = append(line, `,"type":"page_view","page":"/p/`...)
		line = strconv.AppendInt(line, int64(i%997), 10)
		line = append(line, `","ua":"Mozilla/5.0"}`+"\n"...)
		if _, err := w.Write(line); err != nil {
			return 0, 0, errors.Join(fmt.Errorf("bench: write %s: %w", name, err), f.Close())
		}
	}
	if err := errors.Join(w.Flush(), f.Sync()); err != nil {
		return 0, 0, errors.Join(fmt.Errorf("bench: write %s: %w", name, err), f.Close())
	}
	fi, err := f.Stat()
	if err = errors.Join(err, f.Close()); err != nil {
		return 0, 0, fmt.Errorf("bench: %s: %w", name, err)
	}
	return fi.Size(), distinct, nil
}

// runFilterTool runs args with the input on stdin and the output to out,
// and reads the process's peak resident set from the kernel.
func runFilterTool(ctx context.Context, tool string, args []string, in, out string) (FilterCmdRow, error) {
	row := FilterCmdRow{Tool: tool, Command: fmt.Sprintf("%q < input > output", args)}
	fin, err := os.Open(in)
	if err != nil {
		return row, fmt.Errorf("bench: %w", err)
	}
	defer fin.Close()
	fout, err := os.Create(out)
	if err != nil {
		return row, fmt.Errorf("bench: %w", err)
	}
	defer fout.Close()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout = fin, fout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return row, fmt.Errorf("bench: %s: %w: %s", tool, err, bytes.TrimSpace(stderr.Bytes()))
	}
	row.Elapsed = time.Since(start)
	row.PeakRSS = procmem.ChildPeak(cmd.ProcessState)
	if _, err := fout.Seek(0, io.SeekStart); err != nil {
		return row, fmt.Errorf("bench: %w", err)
	}
	sc := bufio.NewScanner(fout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		row.LinesOut++
	}
	if err := sc.Err(); err != nil {
		return row, fmt.Errorf("bench: read %s's output: %w", tool, err)
	}
	return row, nil
}

// WriteText writes the comparison's table.
func (r *FilterCmdResult) WriteText(w io.Writer) error {
	if r.Machine != nil {
		fmt.Fprintf(w, "%s\n", r.Machine)
	}
	fmt.Fprintf(w, "%d NDJSON lines (%s, %s distinct event_id), each tool a process of its own, input on stdin:\n",
		r.Config.Lines, humanize.Bytes(uint64(r.Bytes)), humanize.Count(float64(r.Distinct)))
	var rows [][]string
	for _, x := range r.Rows {
		rows = append(rows, []string{x.Tool, fmt.Sprintf("%.2fs", x.Elapsed.Seconds()), strconv.Itoa(x.LinesOut),
			humanize.Bytes(x.PeakRSS), bytesPerKey(x.PeakPerKey)})
	}
	if err := table(w, "tool\twall\tlines kept\tpeak RSS\tpeak/key", rows); err != nil {
		return err
	}
	fmt.Fprintln(w, "peak RSS = the kernel's ru_maxrss of the finished process, as /usr/bin/time -v reports it")
	return nil
}
