package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/snapshot"
)

// statsConfig is what the flags of `dedup stats` say.
type statsConfig struct {
	engine   engineFlags
	json     bool
	explicit map[string]bool
}

func newStatsFlags(e *env) (*flag.FlagSet, *statsConfig) {
	c := &statsConfig{}
	fs := newFlags(e, "dedup stats", statsHelpHead, statsHelpTail)
	c.engine.register(fs, checkUsage)
	fs.BoolVar(&c.json, "json", false, "print JSON")
	return fs, c
}

// statsReport is what `dedup stats` prints.
type statsReport struct {
	Dir string `json:"dir"`
	// DirBytes is the size of every file in the state directory.
	DirBytes uint64 `json:"dir_bytes"`
	// Options are the state's persisted options.
	Options    stateOptionsJSON `json:"options"`
	Checkpoint *checkpoint      `json:"checkpoint,omitempty"`
	// ForeignCheckpoint is set when another client committed the
	// checkpoint: its size in bytes.
	ForeignCheckpoint int `json:"foreign_checkpoint,omitempty"`
	// Snapshot describes the newest snapshot on disk, nil if none.
	Snapshot *snapshotSummary `json:"snapshot,omitempty"`
	Engine   dedup.Stats      `json:"engine"`
}

// stateOptionsJSON is the persisted options of a state, for JSON.
type stateOptionsJSON struct {
	Window        string `json:"window"`
	Generations   int    `json:"generations"`
	Shards        int    `json:"shards"`
	Filter        string `json:"filter"`
	Probabilistic bool   `json:"probabilistic"`
}

func optionsJSON(o dedup.Options) stateOptionsJSON {
	return stateOptionsJSON{Window: o.Window.String(), Generations: o.Generations, Shards: o.Shards,
		Filter: o.Filter, Probabilistic: o.Probabilistic}
}

// snapshotSummary is the newest snapshot of a state, from its manifest.
type snapshotSummary struct {
	Manifest  string    `json:"manifest"`
	Bytes     int64     `json:"bytes"`
	Segments  int       `json:"segments"`
	CommitSeq uint64    `json:"commit_seq"`
	Created   time.Time `json:"created"`
	// Error is set when the newest manifest does not check out.
	Error string `json:"error,omitempty"`
}

// newestSnapshot summarises the newest snapshot of the state dir, nil if
// it has none.
func newestSnapshot(dir string) *snapshotSummary {
	ms, err := findManifests(filepath.Join(dir, dedup.SnapshotDir))
	if err != nil {
		return nil
	}
	s := &snapshotSummary{Manifest: ms[0]}
	info, err := snapshot.Inspect(vfs.Default, ms[0])
	if err != nil {
		s.Error = err.Error()
		return s
	}
	s.Bytes, s.Segments, s.CommitSeq = info.TotalSize, len(info.Segments), info.CommitSeq
	s.Created = time.Unix(0, info.Created).UTC()
	return s
}

func runStats(e *env, args []string) error {
	fs, c := newStatsFlags(e)
	pos, err := positionals(fs, args, 1, "one state directory")
	if err != nil {
		return err
	}
	c.explicit = explicitFlags(fs)
	dir := pos[0]
	// Open would create a missing directory: refuse instead.
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	if len(ents) == 0 {
		return fmt.Errorf("stats: %s is empty, not a state directory", dir)
	}
	have, err := dedup.StateOptions(dir)
	if err != nil {
		return fmt.Errorf("stats: %w", stateErr(dir, err))
	}
	opts := c.engine.options(dir)
	if err := adoptOptions(dir, have, c.explicit, &opts); err != nil {
		return err
	}
	eng, err := dedup.Open(opts)
	if err != nil {
		return fmt.Errorf("stats: %w", openErr(dir, err))
	}
	rep := statsReport{Dir: dir, Options: optionsJSON(have), Engine: eng.Stats()}
	if raw := eng.Checkpoint(); raw != nil {
		if cp, err := decodeCheckpoint(raw); err == nil {
			rep.Checkpoint = &cp
		} else {
			rep.ForeignCheckpoint = len(raw)
		}
	}
	if err := eng.Close(); err != nil {
		return fmt.Errorf("stats: close: %w", err)
	}
	rep.Snapshot = newestSnapshot(dir)
	rep.DirBytes, _ = dirSize(dir)
	if c.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printStatsReport(e, &rep)
	return nil
}

func printStatsReport(e *env, r *statsReport) {
	w := e.stdout
	st := &r.Engine
	o := r.Options
	mode := "exact"
	if o.Probabilistic {
		mode = "probabilistic"
	}
	fmt.Fprintf(w, "state directory  %s\n", r.Dir)
	fmt.Fprintf(w, "options          window %s, %d generations, %d shards, %s filter, %s\n", o.Window, o.Generations, o.Shards, o.Filter, mode)
	fmt.Fprintf(w, "disk             %s in all, %s of it the store\n", humanize.Bytes(r.DirBytes), humanize.Bytes(st.DiskBytes))
	fmt.Fprintf(w, "keys             %d in the filters (%d restored from %s in %v)\n", st.FilterKeys, st.RestoredKeys, st.RestoredFrom, st.RestoreDuration.Round(time.Millisecond))
	for _, p := range st.RestoreProblems {
		fmt.Fprintf(w, "restore problem  %s\n", p)
	}
	switch s := r.Snapshot; {
	case s == nil:
		fmt.Fprintf(w, "snapshot         none\n")
	case s.Error != "":
		fmt.Fprintf(w, "snapshot         %s: DAMAGED: %s\n", s.Manifest, s.Error)
	default:
		fmt.Fprintf(w, "snapshot         %s, %s in %d segments, commit %d, created %s\n", s.Manifest,
			humanize.Bytes(uint64(s.Bytes)), s.Segments, s.CommitSeq, s.Created.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "filter memory    %s, estimated FP rate %.4g\n", humanize.Bytes(st.FilterBytes), st.EstimatedFPRate)
	fmt.Fprintf(w, "generations      %d live\n", len(st.GenerationStats))
	for _, g := range st.GenerationStats {
		fmt.Fprintf(w, "  gen %-8d %s .. %s  %10d keys  %10s  fp %.4g\n", g.ID,
			g.Start.Format(time.RFC3339), g.End.Format(time.RFC3339), g.Keys, humanize.Bytes(g.Bytes), g.FPRate)
	}
	switch {
	case r.Checkpoint != nil:
		cp := r.Checkpoint
		fmt.Fprintf(w, "last job         %v -> %s\n", cp.Inputs, cp.Out)
		if cp.File >= len(cp.Inputs) {
			fmt.Fprintf(w, "position         complete\n")
		} else {
			fmt.Fprintf(w, "position         input %d (%s) byte %d, line %d\n", cp.File, cp.Inputs[cp.File], cp.Offset, cp.Line)
		}
		fmt.Fprintf(w, "output lengths   out %d, dups %d, rejects %d bytes\n", cp.OutLen, cp.DupsLen, cp.RejectsLen)
		n := cp.Counts
		fmt.Fprintf(w, "committed counts %d events: %d distinct, %d duplicates, %d rejects, %s read\n",
			n.Events, n.Distinct, n.Duplicates, n.Rejects, humanize.Bytes(uint64(n.Bytes)))
	case r.ForeignCheckpoint > 0:
		fmt.Fprintf(w, "checkpoint       %d bytes, not written by dedup filter\n", r.ForeignCheckpoint)
	default:
		fmt.Fprintf(w, "checkpoint       none\n")
	}
}
