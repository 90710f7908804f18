package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/diskuse"
	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/snapshot"
	"github.com/streamdedup/dedup/stream"
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

// statsReport is what `dedup stats` prints. Its JSON names are
// snake_case and its durations are in seconds, named so.
type statsReport struct {
	Dir string `json:"dir"`
	// DirBytes is the space the state directory takes on disk, as du
	// counts it (allocated blocks): StoreBytes for the Pebble store plus
	// SnapshotsBytes for its snapshots folder.
	DirBytes       uint64 `json:"dir_bytes"`
	StoreBytes     uint64 `json:"store_bytes"`
	SnapshotsBytes uint64 `json:"snapshots_bytes"`
	// InUse says another process holds the state: what follows comes from
	// its newest snapshot, without the engine (no checkpoint, no engine).
	InUse bool `json:"in_use,omitempty"`
	// Options are the state's persisted options (in use: the newest
	// snapshot's; nil if it has none yet).
	Options    *stateOptionsJSON  `json:"options,omitempty"`
	Checkpoint *stream.Checkpoint `json:"checkpoint,omitempty"`
	// ForeignCheckpointBytes is set when another client committed the
	// checkpoint: its size.
	ForeignCheckpointBytes int `json:"foreign_checkpoint_bytes,omitempty"`
	// Snapshot describes the newest snapshot on disk, nil if none.
	Snapshot *snapshotSummary `json:"snapshot,omitempty"`
	Engine   *engineStatsJSON `json:"engine,omitempty"`
}

// stateOptionsJSON is the persisted options of a state, for JSON.
type stateOptionsJSON struct {
	WindowSeconds float64 `json:"window_seconds"`
	Generations   int     `json:"generations"`
	Shards        int     `json:"shards"`
	Filter        string  `json:"filter"`
	Probabilistic bool    `json:"probabilistic"`
}

func optionsJSON(o dedup.Options) *stateOptionsJSON {
	return &stateOptionsJSON{WindowSeconds: o.Window.Seconds(), Generations: o.Generations, Shards: o.Shards,
		Filter: o.Filter, Probabilistic: o.Probabilistic}
}

// options returns o as engine options.
func (o *stateOptionsJSON) options() dedup.Options {
	return dedup.Options{Window: time.Duration(o.WindowSeconds * float64(time.Second)), Generations: o.Generations,
		Shards: o.Shards, Filter: o.Filter, Probabilistic: o.Probabilistic}
}

// engineStatsJSON is dedup.Stats for JSON (see its fields).
type engineStatsJSON struct {
	Observed          uint64           `json:"observed"`
	New               uint64           `json:"new"`
	Duplicate         uint64           `json:"duplicate"`
	InFlight          uint64           `json:"in_flight"`
	InFlightKeys      int64            `json:"in_flight_keys"`
	StoreLookups      uint64           `json:"store_lookups"`
	FalsePositives    uint64           `json:"false_positives"`
	Generations       int              `json:"generations"`
	GenerationStats   []generationJSON `json:"generation_stats"`
	FilterBytes       uint64           `json:"filter_bytes"`
	FilterKeys        uint64           `json:"filter_keys"`
	EstimatedFPRate   float64          `json:"estimated_fp_rate"`
	ObservedFPSamples uint64           `json:"observed_fp_samples"`
	// ObservedFPRate is null while ObservedFPSamples is 0: not measured.
	ObservedFPRate              *float64 `json:"observed_fp_rate"`
	Seals                       uint64   `json:"seals"`
	SealErrors                  uint64   `json:"seal_errors"`
	Commits                     uint64   `json:"commits"`
	CommitErrors                uint64   `json:"commit_errors"`
	CommittedKeys               uint64   `json:"committed_keys"`
	CommitLatencyMeanSeconds    float64  `json:"commit_latency_mean_seconds"`
	CommitLatencyLastSeconds    float64  `json:"commit_latency_last_seconds"`
	CommitLatencyMaxSeconds     float64  `json:"commit_latency_max_seconds"`
	LastCommitError             string   `json:"last_commit_error,omitempty"`
	RestoredKeys                uint64   `json:"restored_keys"`
	RestoreDurationSeconds      float64  `json:"restore_duration_seconds"`
	RestoredFrom                string   `json:"restored_from"`
	RestoreProblems             []string `json:"restore_problems,omitempty"`
	Snapshots                   uint64   `json:"snapshots"`
	SnapshotErrors              uint64   `json:"snapshot_errors"`
	LastSnapshotError           string   `json:"last_snapshot_error,omitempty"`
	LastSnapshotDurationSeconds float64  `json:"last_snapshot_duration_seconds"`
	LastSnapshotWrittenBytes    int64    `json:"last_snapshot_written_bytes"`
	SnapshotBytes               int64    `json:"snapshot_bytes"`
	DiskBytes                   uint64   `json:"disk_bytes"`
	// WindowAdvice is the window advisor's: stats observes no keys, so it
	// measures nothing (a running engine does: dedup filter --stats,
	// --metrics).
	WindowAdvice *windowAdviceJSON `json:"window_advice"`
	// SavedWindowAdvice is the last advice a running engine measured on
	// this state, with when (dedup.Stats.SavedWindowAdvice); null if none.
	SavedWindowAdvice *savedAdviceJSON `json:"saved_window_advice"`
	// AutoWindow is the window in force and, for a window sized by
	// --window auto, the last state of its sizing as saved with the
	// state (dedup.Stats.AutoWindow, dedup.SavedWindowAdvice.AutoWindow).
	AutoWindow *autoWindowJSON `json:"auto_window"`
}

// autoWindowJSON is dedup.AutoWindowStats for JSON: Window is the window
// in force; the other fields are those the engine that sized it saved
// (zero, and reason "fixed", for a fixed window). LastChange is on that
// engine's clock (event time with --time-field), null if none.
type autoWindowJSON struct {
	WindowSeconds float64    `json:"window_seconds"`
	Auto          bool       `json:"auto"`
	TargetSeconds float64    `json:"target_seconds"`
	TargetBytes   uint64     `json:"target_bytes"`
	Changes       uint64     `json:"changes"`
	LastChange    *time.Time `json:"last_change"`
	Reason        string     `json:"reason"`
}

// autoJSON describes the window of st: in force, and as the engine that
// sized it saved it.
func autoJSON(st dedup.Stats) *autoWindowJSON {
	a := st.AutoWindow
	auto := a.Reason != "fixed"
	if sa := st.SavedWindowAdvice; sa != nil && sa.AutoWindow != nil && a.Target == 0 && a.Changes == 0 {
		// The engine stats opened decided nothing (it observes nothing):
		// the sizing is the one saved, the window in force the state's.
		a, auto = *sa.AutoWindow, true
		a.Window = st.AutoWindow.Window
	}
	j := &autoWindowJSON{WindowSeconds: a.Window.Seconds(), Auto: auto, TargetSeconds: a.Target.Seconds(),
		TargetBytes: a.TargetBytes, Changes: a.Changes, Reason: a.Reason}
	if !a.LastChange.IsZero() {
		t := a.LastChange.UTC()
		j.LastChange = &t
	}
	return j
}

// savedAdviceJSON is dedup.SavedWindowAdvice for JSON.
type savedAdviceJSON struct {
	MeasuredAt time.Time         `json:"measured_at"`
	Advice     *windowAdviceJSON `json:"advice"`
}

func engineJSON(st dedup.Stats) *engineStatsJSON {
	j := &engineStatsJSON{
		Observed: st.Observed, New: st.New, Duplicate: st.Duplicate, InFlight: st.InFlightVerdicts, InFlightKeys: st.InFlightKeys,
		StoreLookups: st.StoreLookups, FalsePositives: st.FalsePositives, Generations: st.Generations,
		GenerationStats: []generationJSON{},
		FilterBytes:     st.FilterBytes, FilterKeys: st.FilterKeys, EstimatedFPRate: st.EstimatedFPRate,
		ObservedFPSamples: st.ObservedFPSamples, Seals: st.Seals, SealErrors: st.SealErrors,
		WindowAdvice: adviceJSON(st.WindowAdvice),
		Commits:      st.Commits, CommitErrors: st.CommitErrors, CommittedKeys: st.CommittedKeys,
		CommitLatencyMeanSeconds: st.CommitLatencyMean.Seconds(), CommitLatencyLastSeconds: st.CommitLatencyLast.Seconds(),
		CommitLatencyMaxSeconds: st.CommitLatencyMax.Seconds(), LastCommitError: st.LastCommitError,
		RestoredKeys: st.RestoredKeys, RestoreDurationSeconds: st.RestoreDuration.Seconds(), RestoredFrom: st.RestoredFrom,
		RestoreProblems: st.RestoreProblems, Snapshots: st.Snapshots, SnapshotErrors: st.SnapshotErrors,
		LastSnapshotError: st.LastSnapshotError, LastSnapshotDurationSeconds: st.LastSnapshotDuration.Seconds(),
		LastSnapshotWrittenBytes: st.LastSnapshotWritten, SnapshotBytes: st.SnapshotBytes, DiskBytes: st.DiskBytes,
	}
	if sa := st.SavedWindowAdvice; sa != nil {
		j.SavedWindowAdvice = &savedAdviceJSON{MeasuredAt: sa.MeasuredAt, Advice: adviceJSON(sa.Advice)}
	}
	j.AutoWindow = autoJSON(st)
	if st.ObservedFPSamples > 0 {
		r := st.ObservedFPRate
		j.ObservedFPRate = &r
	}
	for _, g := range st.GenerationStats {
		j.GenerationStats = append(j.GenerationStats, generationJSON{ID: g.ID, Start: g.Start.UTC(), End: g.End.UTC(),
			Kind: g.Kind, Sealed: &g.Sealed, Keys: g.Keys, MemoryBytes: g.Bytes, FPRate: g.FPRate})
	}
	return j
}

// observedFP describes the observed false-positive rate of samples
// sampled new keys: what it is, or that it is not measured yet.
func observedFP(samples uint64, rate float64) string {
	if samples == 0 {
		return "not measured yet: no sampled new key observed since the engine opened " +
			"(after a restart from a snapshot, none counts until the generations restored have expired, about a window)"
	}
	return fmt.Sprintf("%.4g: the filters wrongly matched %d of %d sampled new keys (1 in 1024, checked exactly, on the real traffic)",
		rate, uint64(math.Round(rate*float64(samples))), samples)
}

// sealsLine describes a fuse state's seals since the state was opened.
func sealsLine(seals, errors uint64) string {
	s := fmt.Sprintf("%d done, %d failed since the engine opened (one per generation and shard)", seals, errors)
	if errors > 0 {
		s += "; a failed one keeps its blocked filter: more memory, no key lost (the log says why)"
	}
	return s
}

// snapshotSummary is the newest snapshot of a state, from its manifest.
type snapshotSummary struct {
	Manifest  string    `json:"manifest"`
	Bytes     int64     `json:"bytes"`
	Segments  int       `json:"segments"`
	Keys      uint64    `json:"keys"`
	CommitSeq uint64    `json:"commit_seq"`
	Created   time.Time `json:"created"`
	// Options are the options the snapshot was written with, nil if
	// unreadable.
	Options *stateOptionsJSON `json:"-"`
	// Error is set when the newest manifest does not check out.
	Error string `json:"error,omitempty"`
}

// newestSnapshot summarises the newest snapshot of the state dir, nil if
// it has none. It reads the manifest and the segment headers only: it
// works on a state in use.
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
	for _, g := range info.Segments {
		s.Keys += g.Count
	}
	var o struct {
		Window        time.Duration `json:"window"`
		Generations   int           `json:"generations"`
		Shards        int           `json:"shards"`
		Filter        string        `json:"filter"`
		Probabilistic bool          `json:"probabilistic"`
	}
	if json.Unmarshal(info.Options, &o) == nil && o.Window > 0 {
		s.Options = optionsJSON(dedup.Options{Window: o.Window, Generations: o.Generations, Shards: o.Shards,
			Filter: o.Filter, Probabilistic: o.Probabilistic})
	}
	return s
}

func runStats(e *env, args []string) error {
	fs, c := newStatsFlags(e)
	pos, err := positionals(fs, args, 1, "one state directory")
	if err != nil {
		return err
	}
	c.explicit = explicitFlags(fs)
	// With the state's directory: --filter fuse needs one.
	if err := checkOptions(c.engine.options(pos[0]), c.explicit); err != nil {
		return err
	}
	dir := pos[0]
	// Open would create a missing directory: refuse instead.
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	if len(ents) == 0 {
		return fmt.Errorf("stats: %s is empty, not a state directory", dir)
	}
	if err := serveStateDir(dir, ents); err != nil {
		return err
	}
	rep := statsReport{Dir: dir}
	have, err := dedup.StateOptions(dir)
	if err == nil {
		err = c.fromEngine(dir, have, &rep)
	}
	if inUse(err) {
		err = c.inUse(dir, &rep)
	}
	if err != nil {
		return err
	}
	if rep.Snapshot == nil {
		rep.Snapshot = newestSnapshot(dir)
	}
	rep.DirBytes, rep.StoreBytes, rep.SnapshotsBytes = stateDiskUse(dir)
	if c.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printStatsReport(e, &rep)
	return nil
}

// serveStateDir returns an error naming the state directories to give
// stats when dir is the --state DIR of 'dedup serve' (one state per table,
// in DIR/<table>/engine) or one of its tables, nil otherwise: opened as a
// state, it reads as a directory of foreign files.
func serveStateDir(dir string, ents []os.DirEntry) error {
	isTable := func(d string) bool {
		_, err := os.Stat(filepath.Join(d, "table.json"))
		return err == nil
	}
	if isTable(dir) {
		return fmt.Errorf("stats: %s is a table of 'dedup serve', its state in engine/: dedup stats %s",
			dir, filepath.Join(dir, "engine"))
	}
	var engines []string
	for _, ent := range ents {
		if t := filepath.Join(dir, ent.Name()); ent.IsDir() && isTable(t) {
			engines = append(engines, "dedup stats "+filepath.Join(t, "engine"))
		}
	}
	if len(engines) == 0 {
		return nil
	}
	return fmt.Errorf("stats: %s is the state of 'dedup serve', one state per table: %s",
		dir, strings.Join(engines, "; "))
}

// fromEngine fills rep by opening the state dir, whose options are have.
func (c *statsConfig) fromEngine(dir string, have dedup.Options, rep *statsReport) error {
	opts := c.engine.options(dir)
	if err := adoptOptions(dir, have, c.explicit, &opts); err != nil {
		return err
	}
	// Show the window --window auto sized, and leave it in force.
	opts.KeepWindow = true
	eng, err := dedup.Open(opts)
	if err != nil {
		if inUse(err) {
			return err
		}
		return fmt.Errorf("stats: %w", openErr(dir, err))
	}
	rep.Options, rep.Engine = optionsJSON(have), engineJSON(eng.Stats())
	if raw := eng.Checkpoint(); raw != nil {
		if cp, err := stream.DecodeCheckpoint(raw); err == nil {
			rep.Checkpoint = &cp
		} else {
			rep.ForeignCheckpointBytes = len(raw)
		}
	}
	if err := eng.Close(); err != nil {
		return fmt.Errorf("stats: close: %w", err)
	}
	return nil
}

// inUse fills rep for the state dir that another process holds, from its
// newest snapshot: Pebble's lock keeps the store, the checkpoint and the
// live figures from a second process (the running 'dedup filter' serves
// them on --metrics). The check flags are checked against the snapshot.
func (c *statsConfig) inUse(dir string, rep *statsReport) error {
	rep.InUse = true
	rep.Snapshot = newestSnapshot(dir)
	if rep.Snapshot != nil && rep.Snapshot.Options != nil {
		rep.Options = rep.Snapshot.Options
		o := c.engine.options(dir)
		return adoptOptions(dir, rep.Options.options(), c.explicit, &o)
	}
	for _, f := range []string{"window", "generations", "shards", "filter", "probabilistic"} {
		if c.explicit[f] {
			return fmt.Errorf("stats: state directory %s is in use by another process and has no snapshot yet: --%s cannot be checked", dir, f)
		}
	}
	return nil
}

// stateDiskUse returns the space the state directory dir takes on disk
// as du counts it, and its parts: the store (everything outside the
// snapshots folder: Pebble's tables, logs and manifest) and the snapshots.
// The engine's Stats.DiskBytes counts the whole directory, snapshots
// included, so it cannot stand for the store. A part that cannot be
// measured counts 0.
func stateDiskUse(dir string) (all, store, snapshots uint64) {
	all, _ = diskuse.Bytes(vfs.Default, dir)
	snapshots, _ = diskuse.Bytes(vfs.Default, filepath.Join(dir, dedup.SnapshotDir))
	if snapshots <= all {
		store = all - snapshots
	}
	return all, store, snapshots
}

func printStatsReport(e *env, r *statsReport) {
	w := e.stdout
	fmt.Fprintf(w, "state directory  %s\n", r.Dir)
	if r.InUse {
		fmt.Fprintf(w, "in use           by another process: what follows is from its newest snapshot; the checkpoint and the live figures need the state free (or the running filter's --metrics)\n")
	}
	if o := r.Options; o != nil {
		fmt.Fprintf(w, "options          %s\n", describeOptions(o.options()))
	} else {
		fmt.Fprintf(w, "options          unknown until the first snapshot\n")
	}
	st := r.Engine
	if st != nil {
		fmt.Fprintf(w, "disk             %s in all: the store %s, snapshots %s\n", humanize.Bytes(r.DirBytes),
			humanize.Bytes(r.StoreBytes), humanize.Bytes(r.SnapshotsBytes))
		fmt.Fprintf(w, "keys             %d in the filters (%d restored from %s in %v)\n", st.FilterKeys, st.RestoredKeys, st.RestoredFrom,
			time.Duration(st.RestoreDurationSeconds*float64(time.Second)).Round(time.Millisecond))
		for _, p := range st.RestoreProblems {
			fmt.Fprintf(w, "restore problem  %s\n", p)
		}
	} else {
		fmt.Fprintf(w, "disk             %s in all: the store %s, snapshots %s\n", humanize.Bytes(r.DirBytes),
			humanize.Bytes(r.StoreBytes), humanize.Bytes(r.SnapshotsBytes))
	}
	switch s := r.Snapshot; {
	case s == nil:
		fmt.Fprintf(w, "snapshot         none\n")
	case s.Error != "":
		fmt.Fprintf(w, "snapshot         %s: DAMAGED: %s\n", s.Manifest, s.Error)
	default:
		fmt.Fprintf(w, "snapshot         %s, %s in %d segments, %d keys, commit %d, created %s\n", s.Manifest,
			humanize.Bytes(uint64(s.Bytes)), s.Segments, s.Keys, s.CommitSeq, s.Created.Format(time.RFC3339))
	}
	if st == nil {
		return
	}
	fmt.Fprintf(w, "filter memory    %s, estimated FP rate %.4g\n", humanize.Bytes(st.FilterBytes), st.EstimatedFPRate)
	if st.ObservedFPSamples == 0 {
		// Always so: the engine stats opens observes nothing.
		fmt.Fprintf(w, "observed FP      not measured here (stats observes no keys): a running engine measures it on its traffic, see its --metrics dedup_engine_observed_fp_rate\n")
	} else {
		fmt.Fprintf(w, "observed FP      %s\n", observedFP(st.ObservedFPSamples, deref(st.ObservedFPRate)))
	}
	if st.WindowAdvice != nil && st.WindowAdvice.Caught+st.WindowAdvice.HorizonMatches > 0 {
		fmt.Fprintf(w, "window advice    %.0f leaks per million events; window for 100/M %.0fs\n", st.WindowAdvice.LeaksPerMillion, st.WindowAdvice.WindowFor100PerMillionSeconds)
	} else if sa := st.SavedWindowAdvice; sa != nil && sa.Advice != nil {
		fmt.Fprintf(w, "window advice    %.0f leaks per million events; window for 100/M %.0fs (saved: measured by a running engine %s)\n",
			sa.Advice.LeaksPerMillion, sa.Advice.WindowFor100PerMillionSeconds, sa.MeasuredAt.UTC().Format(time.RFC3339))
	} else {
		// Always so: the advisor counts the traffic an engine observes.
		fmt.Fprintf(w, "window advice    not measured here (stats observes no keys): a running engine measures it on its traffic, see dedup filter --stats or --metrics dedup_engine_window_leaks_per_million\n")
	}
	if a := st.AutoWindow; a != nil {
		fmt.Fprintf(w, "window           %s\n", describeAutoWindow(a))
	}
	fuse := r.Options != nil && r.Options.Filter == "fuse"
	fmt.Fprintf(w, "generations      %d in the window, oldest first, with their filter kind\n", len(st.GenerationStats))
	unsealed := false
	for i, g := range st.GenerationStats {
		kind := g.Kind
		switch {
		case g.Sealed != nil && *g.Sealed:
			kind += ", sealed"
		case fuse && strings.Contains(g.Kind, "fuse"):
			kind += ", sealed in some shards"
			unsealed = true
		case fuse && i == len(st.GenerationStats)-1:
			kind += ", newest"
		case fuse:
			kind += ", not sealed"
			unsealed = true
		}
		fmt.Fprintf(w, "  gen %-8d %s .. %s  %-20s %10d keys  %10s  fp %.4g\n", g.ID,
			g.Start.Format(time.RFC3339), g.End.Format(time.RFC3339), kind, g.Keys, humanize.Bytes(g.MemoryBytes), g.FPRate)
	}
	if fuse {
		fmt.Fprintf(w, "  sealed: rebuilt as a static fuse filter once a newer generation took over; newest: takes the new keys\n")
		if unsealed {
			fmt.Fprintf(w, "  not sealed: was the newest at the last snapshot, or its seal failed; stays blocked until it expires\n")
		}
		fmt.Fprintf(w, "fuse seals       %s\n", sealsLine(st.Seals, st.SealErrors))
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
	case r.ForeignCheckpointBytes > 0:
		fmt.Fprintf(w, "checkpoint       %d bytes, not written by dedup filter\n", r.ForeignCheckpointBytes)
	default:
		fmt.Fprintf(w, "checkpoint       none\n")
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// describeAutoWindow says what window is in force and, for --window auto,
// its target, last change and why it is what it is.
func describeAutoWindow(a *autoWindowJSON) string {
	win := time.Duration(a.WindowSeconds * float64(time.Second)).Round(time.Second)
	if !a.Auto {
		return fmt.Sprintf("%v in force (fixed)", win)
	}
	target := "not known yet"
	if a.TargetSeconds > 0 {
		target = time.Duration(a.TargetSeconds * float64(time.Second)).Round(time.Second).String()
		if a.TargetBytes > 0 {
			target += fmt.Sprintf(" (about %s of filters)", humanize.Bytes(a.TargetBytes))
		}
	}
	last := "no change"
	if a.LastChange != nil {
		last = fmt.Sprintf("last change %s (%d in all by the engine that saved it)", a.LastChange.Format(time.RFC3339), a.Changes)
	}
	return fmt.Sprintf("%v in force (auto): target %s; %s; reason: %s", win, target, last, a.Reason)
}
