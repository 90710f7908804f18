package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/fprate"
	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/snapshot"
)

// snapshotSubs are the subcommands of `dedup snapshot`.
var snapshotSubs = []command{
	{"inspect", "print the generations, spans, counts, fill, estimated FP and sizes of a snapshot", runInspect, flagSetOf(newInspectFlags), nil},
	{"verify", "check every checksum and decode every filter (exit 0 valid, 1 invalid)", runVerify, flagSetOf(newVerifyFlags), nil},
	{"rebuild", "rebuild an exact state's filters from its store and write a fresh snapshot", runRebuild, newRebuildFlags, nil},
}

// newSnapshotFlags is the flag set of `dedup snapshot` itself, which has
// no flags: its Usage lists the subcommands.
func newSnapshotFlags(e *env) *flag.FlagSet { return newFlags(e, "dedup snapshot", snapshotHelp, "") }

func runSnapshot(e *env, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, snapshotHelp)
		return usagef("snapshot: want a subcommand: inspect, verify or rebuild")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(e.stdout, snapshotHelp)
		return nil
	}
	if s := findCommand(snapshotSubs, args[0]); s != nil {
		return s.run(e, args[1:])
	}
	return usagef("snapshot: unknown subcommand %q (want inspect, verify or rebuild)", args[0])
}

// inspectConfig is what the flags of `dedup snapshot inspect` say.
type inspectConfig struct {
	json     bool
	segments bool
	quick    bool
}

func newInspectFlags(e *env) (*flag.FlagSet, *inspectConfig) {
	c := &inspectConfig{}
	fs := newFlags(e, "dedup snapshot inspect", inspectHelpHead, inspectHelpTail)
	fs.BoolVar(&c.json, "json", false, "print JSON (every segment included)")
	fs.BoolVar(&c.segments, "segments", false, "also print one line per segment (generation and shard)")
	fs.BoolVar(&c.quick, "quick", false, "read the manifest and segment headers only: no fill, capacity or FP (which need every payload decoded)")
	return fs, c
}

// segmentReport is one segment (one generation of one shard).
type segmentReport struct {
	Generation uint64    `json:"generation"`
	Shard      uint32    `json:"shard"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Kind       string    `json:"kind"`
	Final      bool      `json:"final"` // written once, never changes again
	Keys       uint64    `json:"keys"`
	File       string    `json:"file"`
	FileBytes  int64     `json:"file_bytes"`
	filterFigures
}

// filterFigures are what the decoded filters say of a segment or, summed
// over its shards, of a generation; all zero with --quick.
type filterFigures struct {
	Capacity    uint64  `json:"capacity,omitempty"`
	MemoryBytes uint64  `json:"memory_bytes,omitempty"`
	Fill        float64 `json:"fill,omitempty"` // keys / capacity
	// FPRate is a segment's false-positive rate, a generation's mean over
	// its shards.
	FPRate float64 `json:"fp_rate,omitempty"`
}

// setFill sets Fill for keys held, where the capacity is known.
func (f *filterFigures) setFill(keys uint64) {
	if f.Capacity > 0 {
		f.Fill = float64(keys) / float64(f.Capacity)
	}
}

// inspectReport is what `dedup snapshot inspect` prints.
type inspectReport struct {
	Manifest      string          `json:"manifest"`
	Version       uint32          `json:"version"`
	CommitSeq     uint64          `json:"commit_seq"`
	Created       time.Time       `json:"created"`
	Options       json.RawMessage `json:"options,omitempty"`
	ManifestBytes int64           `json:"manifest_bytes"`
	TotalBytes    int64           `json:"total_bytes"`
	Keys          uint64          `json:"keys"`
	// Decoded says the payloads were read, verified and decoded: the
	// fields below and the per-generation capacity, fill and FP are set.
	Decoded     bool   `json:"decoded"`
	Capacity    uint64 `json:"capacity,omitempty"`
	MemoryBytes uint64 `json:"memory_bytes,omitempty"`
	// EstimatedFPRate is the false-positive rate a new key meets across
	// the generations (fprate.Mean: 1 - prod(1 - fp) per shard, averaged
	// over the shards).
	EstimatedFPRate float64          `json:"estimated_fp_rate,omitempty"`
	Generations     []generationJSON `json:"generations"`
	Segments        []segmentReport  `json:"segments"`
}

func runInspect(e *env, args []string) error {
	fs, c := newInspectFlags(e)
	path, ms, err := manifestsArg(fs, args)
	if err != nil {
		return err
	}
	rep, err := inspect(ms[0], !c.quick)
	if err != nil {
		return fmt.Errorf("snapshot inspect: %w (run 'dedup snapshot verify %s' to check every snapshot there)", err, path)
	}
	if c.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printInspect(e, rep, c.segments)
	return nil
}

// manifestsArg parses the flags and the one PATH argument of inspect and
// verify, and resolves PATH to its manifests, newest first (findManifests).
func manifestsArg(fs *flag.FlagSet, args []string) (path string, manifests []string, err error) {
	pos, err := positionals(fs, args, 1, "one PATH (a manifest, a snapshots folder or a state directory)")
	if err != nil {
		return "", nil, err
	}
	if manifests, err = findManifests(pos[0]); err != nil {
		return "", nil, fmt.Errorf("%s: %w", strings.TrimPrefix(fs.Name(), "dedup "), err)
	}
	return pos[0], manifests, nil
}

// inspect summarises the snapshot whose manifest is path; with decode it
// reads every payload (verifying it) and decodes its filter.
func inspect(path string, decode bool) (*inspectReport, error) {
	info, err := snapshot.Inspect(vfs.Default, path)
	if err != nil {
		return nil, err
	}
	rep := &inspectReport{
		Manifest: path, Version: info.Version, CommitSeq: info.CommitSeq,
		Created: time.Unix(0, info.Created).UTC(), ManifestBytes: info.ManifestSize, TotalBytes: info.TotalSize,
	}
	if json.Valid(info.Options) {
		rep.Options = json.RawMessage(info.Options)
	}
	for _, s := range info.Segments {
		rep.Segments = append(rep.Segments, segmentReport{
			Generation: s.ID, Shard: s.Shard, Start: time.Unix(0, s.Start).UTC(), End: time.Unix(0, s.End).UTC(),
			Kind: s.Kind.String(), Final: s.Final, Keys: s.Count, File: s.Name, FileBytes: s.Size,
		})
		rep.Keys += s.Count
	}
	if decode {
		snap, err := snapshot.Read(vfs.Default, path)
		if err != nil {
			return nil, err
		}
		if len(snap.Generations) != len(rep.Segments) {
			return nil, fmt.Errorf("%s changed while read (%d segments, then %d)", path, len(rep.Segments), len(snap.Generations))
		}
		for i := range snap.Generations {
			g := &snap.Generations[i]
			f, err := decodeSegment(g)
			g.Payload = nil
			if err != nil {
				return nil, err
			}
			s := &rep.Segments[i]
			s.Capacity, s.MemoryBytes, s.FPRate = f.Capacity(), f.SizeBytes(), f.FPRate()
			s.setFill(f.Count())
		}
		rep.Decoded = true
	}
	summarise(rep)
	return rep, nil
}

// decodeSegment decodes g's filter and checks it against the manifest.
func decodeSegment(g *snapshot.GenerationInfo) (filter.Filter, error) {
	f, err := filter.Unmarshal(g.Payload)
	if err != nil {
		return nil, fmt.Errorf("segment %s (generation %d shard %d): filter does not decode: %w", g.Name, g.ID, g.Shard, err)
	}
	if f.Kind() != g.Kind {
		return nil, fmt.Errorf("segment %s (generation %d shard %d): holds a %s filter, manifest says %s", g.Name, g.ID, g.Shard, f.Kind(), g.Kind)
	}
	if f.Count() != g.Count {
		return nil, fmt.Errorf("segment %s (generation %d shard %d): filter holds %d keys, manifest says %d", g.Name, g.ID, g.Shard, f.Count(), g.Count)
	}
	return f, nil
}

// summarise fills the per-generation and overall figures of rep from its
// segments.
func summarise(rep *inspectReport) {
	byID := map[uint64]*generationJSON{}
	var ids []uint64
	shardFP := map[uint32][]float64{} // each shard's generations' rates
	for _, s := range rep.Segments {
		g := byID[s.Generation]
		if g == nil {
			final := true
			g = &generationJSON{ID: s.Generation, Start: s.Start, End: s.End, Final: &final}
			byID[s.Generation] = g
			ids = append(ids, s.Generation)
		}
		g.addKind(s.Kind)
		g.Shards++
		*g.Final = *g.Final && s.Final
		g.Keys += s.Keys
		g.FileBytes += s.FileBytes
		g.Capacity += s.Capacity
		g.MemoryBytes += s.MemoryBytes
		g.FPRate += s.FPRate
		rep.Capacity += s.Capacity
		rep.MemoryBytes += s.MemoryBytes
		shardFP[s.Shard] = append(shardFP[s.Shard], s.FPRate)
	}
	slices.Sort(ids)
	for _, id := range ids {
		g := byID[id]
		g.FPRate /= float64(g.Shards)
		if g.Capacity > 0 {
			g.Fill = float64(g.Keys) / float64(g.Capacity)
		}
		rep.Generations = append(rep.Generations, *g)
	}
	shards := slices.Sorted(maps.Keys(shardFP))
	perShard := make([][]float64, len(shards))
	for i, sh := range shards {
		perShard[i] = shardFP[sh]
	}
	rep.EstimatedFPRate = fprate.Mean(perShard)
}

func printInspect(e *env, r *inspectReport, segments bool) {
	w := e.stdout
	fmt.Fprintf(w, "snapshot     %s\n", r.Manifest)
	fmt.Fprintf(w, "format       version %d, covers commit %d, created %s\n", r.Version, r.CommitSeq, r.Created.Format(time.RFC3339))
	var o struct {
		Window        time.Duration `json:"window"`
		Generations   int           `json:"generations"`
		Shards        int           `json:"shards"`
		Filter        string        `json:"filter"`
		Probabilistic bool          `json:"probabilistic"`
	}
	if r.Options != nil && json.Unmarshal(r.Options, &o) == nil && o.Window > 0 {
		fmt.Fprintf(w, "options      %s\n", describeOptions(dedup.Options{Window: o.Window, Generations: o.Generations,
			Shards: o.Shards, Filter: o.Filter, Probabilistic: o.Probabilistic}))
	} else if r.Options != nil {
		fmt.Fprintf(w, "options      %s\n", r.Options)
	}
	fmt.Fprintf(w, "size         %s on disk (%d segments, manifest %d B)\n", humanize.Bytes(uint64(r.TotalBytes)), len(r.Segments), r.ManifestBytes)
	if r.Decoded {
		fmt.Fprintf(w, "keys         %d, capacity %d, fill %.3g%%, filter memory %s\n", r.Keys, r.Capacity, 100*ratio(r.Keys, r.Capacity), humanize.Bytes(r.MemoryBytes))
		fmt.Fprintf(w, "estimated FP %.4g (a new key, across the generations)\n", r.EstimatedFPRate)
	} else {
		fmt.Fprintf(w, "keys         %d (--quick: payloads not decoded)\n", r.Keys)
	}
	fmt.Fprintf(w, "generations  %d\n", len(r.Generations))
	for _, g := range r.Generations {
		state := "live"
		if *g.Final {
			state = "final"
		}
		fmt.Fprintf(w, "  gen %-6d %s .. %s  %-6s %10d keys  %10s", g.ID, g.Start.Format(time.RFC3339), g.End.Format(time.RFC3339), state, g.Keys, humanize.Bytes(uint64(g.FileBytes)))
		if r.Decoded {
			fmt.Fprintf(w, "  fill %.3g%%  fp %.4g", 100*g.Fill, g.FPRate)
		}
		fmt.Fprintln(w)
	}
	if segments {
		fmt.Fprintf(w, "segments\n")
		for _, s := range r.Segments {
			fmt.Fprintf(w, "  gen %-6d shard %-4d %-7s %10d keys  %10s", s.Generation, s.Shard, s.Kind, s.Keys, humanize.Bytes(uint64(s.FileBytes)))
			if r.Decoded {
				fmt.Fprintf(w, "  cap %d  fill %.3g%%  fp %.4g", s.Capacity, 100*s.Fill, s.FPRate)
			}
			fmt.Fprintf(w, "  %s\n", s.File)
		}
	}
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// verifyConfig is what the flags of `dedup snapshot verify` say.
type verifyConfig struct {
	newest bool
}

func newVerifyFlags(e *env) (*flag.FlagSet, *verifyConfig) {
	c := &verifyConfig{}
	fs := newFlags(e, "dedup snapshot verify", verifyHelpHead, verifyHelpTail)
	fs.BoolVar(&c.newest, "newest", false, "in a folder, verify only the newest snapshot (the one a restart loads) instead of every one")
	return fs, c
}

// errInvalid is the exit status 1 of a snapshot that does not verify; the
// reasons were printed already.
var errInvalid = errors.New("snapshot verify: invalid")

func runVerify(e *env, args []string) error {
	fs, c := newVerifyFlags(e)
	_, ms, err := manifestsArg(fs, args)
	if err != nil {
		return err
	}
	if c.newest {
		ms = ms[:1]
	}
	last, state, lerr := storeLastCommit(ms[0])
	switch {
	case lerr != nil && inUse(lerr):
		fmt.Fprintf(e.stdout, "note    the snapshots are not compared with the store of %s: a running process holds it\n", state)
	case lerr != nil:
		fmt.Fprintf(e.stdout, "note    the snapshots are not compared with the store of %s: %v\n", state, lerr)
	}
	bad := 0
	for _, m := range ms {
		n, size, seq, err := verify(m)
		if err == nil && state != "" && lerr == nil && seq > last {
			err = fmt.Errorf("covers commit %d, past the store's last commit %d (%s): the store lost %s, acknowledged as committed; 'dedup repair %s' accepts the loss",
				seq, last, state, exact.CommitSpan(last+1, seq), state)
		}
		if err != nil {
			bad++
			fmt.Fprintf(e.stdout, "INVALID %s: %v\n", m, err)
			continue
		}
		fmt.Fprintf(e.stdout, "ok      %s: %d segments, %s, every checksum and filter good\n", m, n, humanize.Bytes(uint64(size)))
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d of %d snapshots", errInvalid, bad, len(ms))
	}
	return nil
}

// verify checks the snapshot whose manifest is path: every checksum (of
// the manifest and of every segment) and every filter decoding. seq is
// the commit it covers.
func verify(path string) (segments int, size int64, seq uint64, err error) {
	// Read checks what Verify does, and hands over the payloads.
	snap, err := snapshot.Read(vfs.Default, path)
	if err != nil {
		return 0, 0, 0, err
	}
	for i := range snap.Generations {
		g := &snap.Generations[i]
		size += g.Size
		_, err := decodeSegment(g)
		g.Payload = nil
		if err != nil {
			return 0, 0, 0, err
		}
	}
	return len(snap.Generations), size, snap.Header.CommitSeq, nil
}

// storeLastCommit finds the state directory of the snapshot manifest (the
// folder holding its snapshots folder) and the last commit its store
// holds. state is "" when the snapshots are not a state's (a lone
// snapshot folder, a backup's copy): there is no store to compare with.
func storeLastCommit(manifest string) (last uint64, state string, err error) {
	snaps := filepath.Dir(manifest)
	if filepath.Base(snaps) != dedup.SnapshotDir {
		return 0, "", nil
	}
	state = filepath.Dir(snaps)
	if !isState(state) {
		return 0, "", nil
	}
	last, err = dedup.LastCommit(state)
	if errors.Is(err, dedup.ErrNotOurs) {
		return 0, "", nil
	}
	return last, state, err
}

// newRebuildFlags is the flag set of `dedup snapshot rebuild`: no flags.
func newRebuildFlags(e *env) *flag.FlagSet {
	return newFlags(e, "dedup snapshot rebuild", rebuildHelp, "")
}

func runRebuild(e *env, args []string) error {
	fs := newRebuildFlags(e)
	pos, err := positionals(fs, args, 1, "one state directory")
	if err != nil {
		return err
	}
	dir := pos[0]
	if !isState(dir) {
		return fmt.Errorf("snapshot rebuild: %s is missing or empty, not a state directory", dir)
	}
	start := time.Now()
	st, err := dedup.RebuildSnapshot(dir)
	if err != nil {
		return fmt.Errorf("snapshot rebuild: %w", stateErr(dir, err))
	}
	fmt.Fprintf(e.stdout, "rebuilt %s from its store: %d keys restored in %v; snapshot written (%s) in %v; %v in all\n",
		dir, st.RestoredKeys, st.RestoreDuration.Round(time.Millisecond), humanize.Bytes(uint64(st.SnapshotBytes)),
		st.LastSnapshotDuration.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return nil
}
