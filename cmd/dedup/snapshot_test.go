package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/diskuse"
	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/resp"
)

// makeState runs `dedup filter` over lines into a new state directory
// with the extra flags, and returns the state directory.
func makeState(t *testing.T, dir, lines string, flags ...string) string {
	t.Helper()
	in, state := filepath.Join(dir, "in0"), filepath.Join(dir, "state")
	writeFile(t, in, lines)
	args := append([]string{"filter", "--format", "lines", "--state", state, "--in", in, "--out", filepath.Join(dir, "out0")}, flags...)
	if code, _, stderr := runCmd(t, "", args...); code != 0 {
		t.Fatalf("make state: exit %d: %s", code, stderr)
	}
	return state
}

// filterLines runs `dedup filter --format lines --state state` over lines
// with the extra flags and returns the distinct output.
func filterLines(t *testing.T, state, lines string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	writeFile(t, in, lines)
	args := append([]string{"filter", "--format", "lines", "--state", state, "--in", in, "--out", out}, flags...)
	if code, _, stderr := runCmd(t, "", args...); code != 0 {
		t.Fatalf("filter %v: exit %d: %s", flags, code, stderr)
	}
	return readFile(t, out)
}

func manifests(t *testing.T, state string) []string {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(state, dedup.SnapshotDir, "snapshot-*.manifest"))
	return ms
}

// TestStatsAdoptsOptions: `dedup stats DIR` needs none of the flags DIR
// was made with, reports the restore source and the snapshot, and a check
// flag that contradicts DIR is bad usage naming it.
func TestStatsAdoptsOptions(t *testing.T) {
	state := makeState(t, t.TempDir(), "a\nb\na\nc\n", "--window", "10m", "--generations", "4", "--filter", "bloom")
	code, stdout, stderr := runCmd(t, "", "stats", state)
	for _, want := range []string{
		"window 10m0s, 4 generations, 16 shards, bloom filter, exact",
		"3 in the filters (3 restored from snapshot",
		"snapshot         " + filepath.Join(state, dedup.SnapshotDir, "snapshot-"),
		"4 events: 3 distinct, 1 duplicates",
	} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Fatalf("stats: exit %d, want %q:\n%s%s", code, want, stdout, stderr)
		}
	}
	code, stdout, _ = runCmd(t, "", "stats", "--json", state)
	var rep statsReport
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
		t.Fatalf("stats --json: exit %d, %v: %s", code, err, stdout)
	}
	if rep.Options == nil || rep.Options.WindowSeconds != 600 || rep.Snapshot == nil || rep.Snapshot.Bytes == 0 || rep.Engine == nil || rep.Engine.RestoredFrom != dedup.RestoredSnapshot || rep.DirBytes == 0 {
		t.Fatalf("stats --json: %+v", rep)
	}
	if code, _, stderr := runCmd(t, "", "stats", "--filter", "cuckoo", state); code != exitBad || !strings.Contains(stderr, "--filter=cuckoo contradicts") {
		t.Fatalf("contradicting check flag: exit %d: %s", code, stderr)
	}
}

// TestFilterResumesState: a second run on a state needs none of its
// shaping flags (they are adopted), remembers its keys, and refuses a flag
// that contradicts it; each run leaves a snapshot behind.
func TestFilterResumesState(t *testing.T) {
	for _, mode := range []string{"exact", "probabilistic"} {
		t.Run(mode, func(t *testing.T) {
			// --rate is not persisted: small filters keep the test fast.
			flags := []string{"--rate", "10", "--window", "30m", "--generations", "5", "--shards", "4", "--filter", "cuckoo", "--snapshot-interval", "0"}
			if mode == "probabilistic" {
				flags = append(flags, "--probabilistic")
			}
			state := makeState(t, t.TempDir(), "a\nb\nc\n", flags...)
			if len(manifests(t, state)) == 0 {
				t.Fatal("no snapshot written at the end of the run (--snapshot-interval 0)")
			}
			// Without any shaping flag: adopted, and the keys are remembered.
			if got := filterLines(t, state, "b\nd\na\ne\n", "--rate", "10"); got != "d\ne\n" {
				t.Fatalf("resumed run: out %q", got)
			}
			// The periodic interval (default) also leaves a snapshot at Close.
			code, stdout, _ := runCmd(t, "", "stats", "--json", state)
			var rep statsReport
			if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
				t.Fatalf("stats: exit %d %v", code, err)
			}
			if rep.Engine == nil || rep.Engine.RestoredFrom != dedup.RestoredSnapshot || rep.Engine.FilterKeys != 5 {
				t.Fatalf("after the second run: restored from %q, %d keys", rep.Engine.RestoredFrom, rep.Engine.FilterKeys)
			}
			// A flag given with the state's own value is fine.
			if got := filterLines(t, state, "f\na\n", "--window", "30m", "--rate", "20"); got != "f\n" {
				t.Fatalf("same-valued flag: out %q", got)
			}
			for _, bad := range [][]string{{"--window", "1h"}, {"--filter", "bloom"}, {"--shards", "16"}, {"--probabilistic=" + map[string]string{"exact": "true", "probabilistic": "false"}[mode]}} {
				name := strings.SplitN(strings.TrimPrefix(bad[0], "--"), "=", 2)[0]
				args := append([]string{"filter", "--format", "lines", "--rate", "10", "--state", state}, bad...)
				code, _, stderr := runCmd(t, "g\n", args...)
				if code != exitBad || !strings.Contains(stderr, "--"+name+"=") || !strings.Contains(stderr, "contradicts the state directory") {
					t.Errorf("%v: exit %d: %s", bad, code, stderr)
				}
			}
		})
	}
}

// flipByte flips one bit in the middle of the largest file matching glob
// and returns its base name.
func flipByte(t *testing.T, glob string) string {
	t.Helper()
	files, _ := filepath.Glob(glob)
	var big string
	var size int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Size() > size {
			big, size = f, fi.Size()
		}
	}
	if big == "" {
		t.Fatalf("no file matches %s", glob)
	}
	b, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(big, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Base(big)
}

// TestSnapshotInspectVerify: inspect and verify a good state (exit 0),
// then one with a bit flipped in a segment: verify exits 1 naming the
// file, and the state still deduplicates (the engine logs the problem
// and falls back).
func TestSnapshotInspectVerify(t *testing.T) {
	state := makeState(t, t.TempDir(), "a\nb\nc\nd\na\n", "--window", "10m")
	code, stdout, stderr := runCmd(t, "", "snapshot", "inspect", state)
	for _, want := range []string{"covers commit", "window 10m0s, 4 generations", "keys         4, capacity", "estimated FP", "generations  1"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Fatalf("inspect: exit %d, want %q:\n%s%s", code, want, stdout, stderr)
		}
	}
	ms := manifests(t, state)
	code, stdout, _ = runCmd(t, "", "snapshot", "inspect", "--json", "--segments", ms[len(ms)-1])
	var rep inspectReport
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
		t.Fatalf("inspect --json: exit %d, %v: %s", code, err, stdout)
	}
	if !rep.Decoded || rep.Keys != 4 || rep.Capacity == 0 || len(rep.Generations) != 1 || rep.Generations[0].Fill <= 0 || len(rep.Segments) == 0 || rep.EstimatedFPRate < 0 {
		t.Fatalf("inspect --json: %+v", rep)
	}
	for _, path := range []string{state, filepath.Join(state, dedup.SnapshotDir), ms[0]} {
		if code, stdout, stderr := runCmd(t, "", "snapshot", "verify", path); code != 0 || !strings.HasPrefix(stdout, "ok ") {
			t.Fatalf("verify %s: exit %d:\n%s%s", path, code, stdout, stderr)
		}
	}

	seg := flipByte(t, filepath.Join(state, dedup.SnapshotDir, "segment-*.seg"))
	code, stdout, stderr = runCmd(t, "", "snapshot", "verify", state)
	if code != exitRuntime || !strings.Contains(stdout, "INVALID") || !strings.Contains(stdout, seg) || !strings.Contains(stderr, "invalid") {
		t.Fatalf("verify after a bit flip in %s: exit %d:\n%s%s", seg, code, stdout, stderr)
	}
	if code, _, stderr := runCmd(t, "", "snapshot", "inspect", state); code != exitRuntime || !strings.Contains(stderr, seg) {
		t.Fatalf("inspect after a bit flip: exit %d: %s", code, stderr)
	}
	// The engine passes over the damaged snapshot, says so on stderr, and
	// loses no key.
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	writeFile(t, in, "a\ne\nd\n")
	code, _, stderr = runCmd(t, "", "filter", "--format", "lines", "--state", state, "--in", in, "--out", out)
	if code != 0 || readFile(t, out) != "e\n" || !strings.Contains(stderr, "dedup: engine: ") {
		t.Fatalf("filter on a damaged snapshot: exit %d, out %q, stderr %s", code, readFile(t, out), stderr)
	}
	// ... and its final snapshot is good again.
	if code, stdout, _ := runCmd(t, "", "snapshot", "verify", "--newest", state); code != 0 {
		t.Fatalf("verify --newest after a run: exit %d: %s", code, stdout)
	}
}

// TestSnapshotInspectFinal: snapshot inspect calls a generation "final"
// when its segments never change again (past, nothing in flight: later
// snapshots reuse them) and the newest "live", in text and as JSON
// "final"; "sealed" is the fuse seal's word (dedup stats), which a final
// generation need not have (the second one here stayed blocked).
func TestSnapshotInspectFinal(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	fuseState(t, state)
	code, out, stderr := runCmd(t, "", "snapshot", "inspect", "--quick", state)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr)
	}
	var states []string
	for _, m := range regexp.MustCompile(`(?m)^  gen .*Z  ([a-z]+) +\d+ keys`).FindAllStringSubmatch(out, -1) {
		states = append(states, m[1])
	}
	if want := []string{"final", "final", "final", "live"}; fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("generations %q, want %q:\n%s", states, want, out)
	}
	if strings.Contains(out, "sealed") {
		t.Errorf("inspect says sealed, the fuse seal's word:\n%s", out)
	}

	code, out, stderr = runCmd(t, "", "snapshot", "inspect", "--quick", "--json", "--segments", state)
	if code != 0 {
		t.Fatalf("inspect --json: exit %d: %s", code, stderr)
	}
	var rep struct {
		Generations []map[string]any `json:"generations"`
		Segments    []map[string]any `json:"segments"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range rep.Generations {
		got = append(got, fmt.Sprint(g["final"]))
	}
	if w := "[true true true false]"; fmt.Sprint(got) != w {
		t.Errorf("JSON generations' final %v, want %s:\n%s", got, w, out)
	}
	if len(rep.Segments) != 8 {
		t.Fatalf("%d segments, want 8 (4 generations, 2 shards):\n%s", len(rep.Segments), out)
	}
	for _, s := range rep.Segments {
		if _, ok := s["final"].(bool); !ok || s["sealed"] != nil {
			t.Errorf("segment %v: want a final flag and no sealed", s)
		}
	}
}

// TestSnapshotRebuild: with its snapshots deleted, a state is rebuilt
// from its store into a fresh, valid snapshot holding every key.
func TestSnapshotRebuild(t *testing.T) {
	state := makeState(t, t.TempDir(), "a\nb\nc\na\nd\ne\n")
	ents, err := os.ReadDir(filepath.Join(state, dedup.SnapshotDir))
	if err != nil || len(ents) == 0 {
		t.Fatalf("snapshots: %v %v", ents, err)
	}
	for _, ent := range ents {
		if err := os.Remove(filepath.Join(state, dedup.SnapshotDir, ent.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := runCmd(t, "", "snapshot", "verify", state); code != exitRuntime || !strings.Contains(stderr, "no snapshot") {
		t.Fatalf("verify without snapshots: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runCmd(t, "", "snapshot", "rebuild", state)
	if code != 0 || !strings.Contains(stdout, "5 keys restored") {
		t.Fatalf("rebuild: exit %d:\n%s%s", code, stdout, stderr)
	}
	if code, stdout, _ := runCmd(t, "", "snapshot", "verify", state); code != 0 {
		t.Fatalf("verify after rebuild: exit %d: %s", code, stdout)
	}
	if code, stdout, _ := runCmd(t, "", "snapshot", "inspect", state); code != 0 || !strings.Contains(stdout, "keys         5,") {
		t.Fatalf("inspect after rebuild: exit %d:\n%s", code, stdout)
	}
	if got := filterLines(t, state, "e\nf\na\n"); got != "f\n" {
		t.Fatalf("after rebuild: out %q", got)
	}
	// A probabilistic state has no store to rebuild from.
	pstate := makeState(t, t.TempDir(), "a\n", "--probabilistic")
	if code, _, stderr := runCmd(t, "", "snapshot", "rebuild", pstate); code != exitRuntime || !strings.Contains(stderr, "probabilistic") {
		t.Fatalf("rebuild probabilistic: exit %d: %s", code, stderr)
	}
}

// TestBackupRestore: a backup restored into a new directory is a state
// that `dedup filter` resumes without its flags, the old events being
// duplicates there; restore refuses a non-empty directory, backup an
// existing destination.
func TestBackupRestore(t *testing.T) {
	dir := t.TempDir()
	state := makeState(t, dir, "a\nb\nc\nb\n", "--window", "20m", "--filter", "bloom")
	bk := filepath.Join(dir, "backup")
	code, stdout, stderr := runCmd(t, "", "backup", state, bk)
	if code != 0 || !strings.Contains(stdout, "3 keys") {
		t.Fatalf("backup: exit %d:\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := runCmd(t, "", "backup", state, bk); code != exitRuntime || !strings.Contains(stderr, "already exists") {
		t.Fatalf("backup onto an existing destination: exit %d: %s", code, stderr)
	}
	// Keys committed after the backup are not in it.
	if got := filterLines(t, state, "z\n"); got != "z\n" {
		t.Fatalf("after backup: %q", got)
	}
	restored := filepath.Join(dir, "restored")
	code, stdout, stderr = runCmd(t, "", "restore", bk, restored)
	for _, want := range []string{"window 20m0s", "bloom filter", "keys             3", "checkpoint       4 events committed (3 distinct)"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Fatalf("restore: exit %d, want %q:\n%s%s", code, want, stdout, stderr)
		}
	}
	if got := filterLines(t, restored, "c\nd\na\nz\nb\n"); got != "d\nz\n" {
		t.Fatalf("filter on the restored state: out %q", got)
	}
	// Into a non-empty directory: refused, and the directory is untouched.
	full := filepath.Join(dir, "full")
	if err := os.Mkdir(full, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(full, "keep"), "x")
	if code, _, stderr := runCmd(t, "", "restore", bk, full); code != exitRuntime || !strings.Contains(stderr, "not empty") {
		t.Fatalf("restore into a non-empty directory: exit %d: %s", code, stderr)
	}
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Fatalf("non-empty directory changed: %v", ents)
	}
	// An empty existing directory is fine.
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, "", "restore", bk, empty); code != 0 {
		t.Fatalf("restore into an empty directory: exit %d: %s", code, stderr)
	}
}

// TestRestoreLoneSnapshot: a probabilistic state comes back from its
// snapshots folder alone.
func TestRestoreLoneSnapshot(t *testing.T) {
	dir := t.TempDir()
	state := makeState(t, dir, "a\nb\n", "--probabilistic", "--window", "15m")
	restored := filepath.Join(dir, "restored")
	code, stdout, stderr := runCmd(t, "", "restore", filepath.Join(state, dedup.SnapshotDir), restored)
	if code != 0 || !strings.Contains(stdout, "probabilistic") || !strings.Contains(stdout, "checkpoint       none") {
		t.Fatalf("restore: exit %d:\n%s%s", code, stdout, stderr)
	}
	if got := filterLines(t, restored, "a\nc\nb\n"); got != "c\n" {
		t.Fatalf("filter on the restored state: out %q", got)
	}
}

// TestHelperHoldState is not a test: run by TestStateInUse as a child
// process, it holds the state directory DEDUP_TEST_HOLD open until its
// stdin closes.
func TestHelperHoldState(t *testing.T) {
	dir := os.Getenv("DEDUP_TEST_HOLD")
	if dir == "" {
		t.Skip("helper process only")
	}
	o, err := dedup.StateOptions(dir)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := dedup.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
	eng.Close()
}

// TestStateInUse: while another process holds a state, the commands that
// open it fail with a message saying so; inspect, verify and stats still
// work.
func TestStateInUse(t *testing.T) {
	state := makeState(t, t.TempDir(), "a\n")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldState$")
	cmd.Env = append(os.Environ(), "DEDUP_TEST_HOLD="+state)
	_, out := startPiped(t, cmd)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper: %q %v", line, err)
	}
	for _, args := range [][]string{
		{"backup", state, filepath.Join(t.TempDir(), "bk")},
		{"snapshot", "rebuild", state},
		{"filter", "--format", "lines", "--state", state},
	} {
		if code, _, stderr := runCmd(t, "a\n", args...); code != exitRuntime || !strings.Contains(stderr, "in use by another process") {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	if code, _, stderr := runCmd(t, "", "snapshot", "verify", state); code != 0 {
		t.Errorf("verify a state in use: exit %d: %s", code, stderr)
	}
	// stats reads what it can without the lock (TestStatsInUse).
	if code, stdout, stderr := runCmd(t, "", "stats", state); code != 0 || !strings.Contains(stdout, "in use") {
		t.Errorf("stats of a state in use: exit %d: %s%s", code, stdout, stderr)
	}
}

// TestStatsStoreExcludesSnapshots: `dedup stats` once printed the whole
// state directory as "the store" (and more than "in all", which summed
// file lengths): the store is the Pebble files, the snapshots are apart.
func TestStatsStoreExcludesSnapshots(t *testing.T) {
	state := makeState(t, t.TempDir(), "a\nb\na\nc\n")
	// An old snapshot segment left behind makes snapshots/ the bulk of
	// the directory, as on a state that has run for a while.
	writeFile(t, filepath.Join(state, dedup.SnapshotDir, "segment-000000-0-0.seg"), strings.Repeat("x", 8<<20))
	// Each open of the engine adds Pebble files: measure after the run.
	du := func() (all, snaps uint64) {
		t.Helper()
		all, err := diskuse.Bytes(vfs.Default, state)
		if err != nil {
			t.Fatal(err)
		}
		snaps, err = diskuse.Bytes(vfs.Default, filepath.Join(state, dedup.SnapshotDir))
		if err != nil {
			t.Fatal(err)
		}
		return all, snaps
	}
	code, stdout, stderr := runCmd(t, "", "stats", "--json", state)
	var rep statsReport
	if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
		t.Fatalf("stats --json: exit %d, %v: %s%s", code, err, stdout, stderr)
	}
	all, snaps := du()
	if rep.DirBytes != all || rep.SnapshotsBytes != snaps || rep.StoreBytes != all-snaps || snaps < 8<<20 {
		t.Errorf("stats --json: dir %d, store %d, snapshots %d bytes; du says dir %d, snapshots %d",
			rep.DirBytes, rep.StoreBytes, rep.SnapshotsBytes, all, snaps)
	}
	code, stdout, stderr = runCmd(t, "", "stats", state)
	all, snaps = du()
	want := fmt.Sprintf("disk             %s in all: the store %s, snapshots %s\n",
		humanize.Bytes(all), humanize.Bytes(all-snaps), humanize.Bytes(snaps))
	if code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("stats: exit %d, want %q:\n%s%s", code, want, stdout, stderr)
	}
}

// TestFilterResumesAMovedJob: a job moved whole (its state restored from a
// backup into another tree, its input and output copied beside it)
// resumes its own output there; the output is byte for byte that of one
// run over the whole input.
func TestFilterResumesAMovedJob(t *testing.T) {
	var first, more strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&first, "k%d\n", i%2100)
		fmt.Fprintf(&more, "k%d\n", 1500+i%2500)
	}
	run := func(state, in, out string) string {
		t.Helper()
		code, _, stderr := runCmd(t, "", "filter", "--format", "lines", "--state", state, "--in", in, "--out", out)
		if code != 0 {
			t.Fatalf("filter --state %s: exit %d: %s", state, code, stderr)
		}
		return stderr
	}
	// One run over the whole input: the reference.
	ref := t.TempDir()
	writeFile(t, filepath.Join(ref, "in"), first.String()+more.String())
	run(filepath.Join(ref, "state"), filepath.Join(ref, "in"), filepath.Join(ref, "out"))

	old := filepath.Join(t.TempDir(), "job")
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	in, state, out := filepath.Join(old, "in"), filepath.Join(old, "state"), filepath.Join(old, "out")
	writeFile(t, in, first.String())
	run(state, in, out)
	f, err := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(more.String())
	f.Close()
	bk := filepath.Join(t.TempDir(), "bk")
	if code, _, stderr := runCmd(t, "", "backup", state, bk); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	// The move: a new tree, the old one gone.
	moved := filepath.Join(t.TempDir(), "elsewhere", "job")
	if code, _, stderr := runCmd(t, "", "restore", bk, filepath.Join(moved, "state")); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	writeFile(t, filepath.Join(moved, "in"), readFile(t, in))
	writeFile(t, filepath.Join(moved, "out"), readFile(t, out))
	if err := os.RemoveAll(old); err != nil {
		t.Fatal(err)
	}
	stderr := run(filepath.Join(moved, "state"), filepath.Join(moved, "in"), filepath.Join(moved, "out"))
	if !strings.Contains(stderr, "committed at another path") {
		t.Errorf("the resume does not say the state moved: %s", stderr)
	}
	if got, want := readFile(t, filepath.Join(moved, "out")), readFile(t, filepath.Join(ref, "out")); got != want {
		t.Fatalf("moved job's output: %d bytes, want %d (one run over the whole input)", len(got), len(want))
	}
}

// TestBackupServeState: `dedup backup` of a stopped `dedup serve --state`
// directory backs up every table with its table.json, and `dedup restore`
// installs it whole; a destination inside the state is refused.
func TestBackupServeState(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "state")
	srv, err := resp.New(resp.Options{Dir: state})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2})
	defer c.Close()
	for _, cmd := range [][]any{{"SET", "k", "1", "NX"}, {"DEDUP.RESERVE", "jobs", "EXPLICITDONE"}, {"DEDUP.OBSERVE", "jobs", "j"}, {"DEDUP.DONE", "jobs", "j"}} {
		if err := c.Do(t.Context(), cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, "", "backup", state, filepath.Join(state, "bk")); code != exitRuntime || !strings.Contains(stderr, "inside") {
		t.Fatalf("backup into the state: exit %d: %s", code, stderr)
	}
	bk := filepath.Join(root, "bk")
	code, stdout, stderr := runCmd(t, "", "backup", state, bk)
	if code != 0 || !strings.Contains(stdout, "2 tables (default, jobs)") {
		t.Fatalf("backup: exit %d:\n%s%s", code, stdout, stderr)
	}
	dst := filepath.Join(root, "restored")
	code, stdout, stderr = runCmd(t, "", "restore", bk, dst)
	if code != 0 || !strings.Contains(stdout, "tables           2: default, jobs") {
		t.Fatalf("restore: exit %d:\n%s%s", code, stdout, stderr)
	}
	opts, ok, err := resp.ReadTableOptions(dst, "jobs")
	if err != nil || !ok || !opts.ExplicitDone {
		t.Fatalf("restored jobs table options %+v, %v, %v: EXPLICITDONE lost", opts, ok, err)
	}
	if code, _, stderr := runCmd(t, "", "restore", state, filepath.Join(root, "r2")); code != exitRuntime || !strings.Contains(stderr, "not a backup") {
		t.Fatalf("restore of a serve state: exit %d: %s", code, stderr)
	}
}

// TestRestoreRefusesAStateInUse: a state another process holds open is
// not restored from (it is not a backup, and it changes under the copy),
// and the message says which process holds it.
func TestRestoreRefusesAStateInUse(t *testing.T) {
	state := makeState(t, t.TempDir(), "a\n")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldState$")
	cmd.Env = append(os.Environ(), "DEDUP_TEST_HOLD="+state)
	_, out := startPiped(t, cmd)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper: %q %v", line, err)
	}
	for i := 0; i < 3; i++ {
		dst := filepath.Join(t.TempDir(), "r")
		code, _, stderr := runCmd(t, "", "restore", state, dst)
		if code != exitRuntime || !strings.Contains(stderr, "in use") || !strings.Contains(stderr, fmt.Sprintf("process %d", cmd.Process.Pid)) {
			t.Fatalf("restore from a state in use: exit %d: %s", code, stderr)
		}
		if _, err := os.Stat(dst); err == nil {
			t.Fatal("a refused restore left its target")
		}
	}
}

// TestGenerationJSONOneShape: dedup stats (engine.generation_stats) and
// dedup snapshot inspect (generations) give a generation in one JSON
// shape: the same names for what both know (id, start, end, kind, keys,
// memory_bytes), "sealed" from the engine alone, "final" and "shards"
// from the snapshot alone.
func TestGenerationJSONOneShape(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	fuseState(t, state)
	code, out, stderr := runCmd(t, "", "stats", "--json", state)
	if code != 0 {
		t.Fatalf("stats --json: exit %d: %s", code, stderr)
	}
	var st struct {
		Engine struct {
			Generations []map[string]any `json:"generation_stats"`
		} `json:"engine"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runCmd(t, "", "snapshot", "inspect", "--json", state)
	if code != 0 {
		t.Fatalf("inspect --json: exit %d: %s", code, stderr)
	}
	var in struct {
		Generations []map[string]any `json:"generations"`
	}
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatal(err)
	}
	if len(st.Engine.Generations) == 0 || len(in.Generations) == 0 {
		t.Fatalf("%d generations in stats, %d in inspect", len(st.Engine.Generations), len(in.Generations))
	}
	check := func(what string, gens []map[string]any, own, others []string) {
		for _, g := range gens {
			for _, k := range append([]string{"id", "start", "end", "kind", "keys", "memory_bytes"}, own...) {
				if _, ok := g[k]; !ok {
					t.Errorf("%s: a generation without %q: %v", what, k, g)
				}
			}
			for _, k := range others {
				if _, ok := g[k]; ok {
					t.Errorf("%s: a generation with %q: %v", what, k, g)
				}
			}
		}
	}
	check("stats", st.Engine.Generations, []string{"sealed"}, []string{"final", "shards", "bytes"})
	check("inspect", in.Generations, []string{"final", "shards", "file_bytes"}, []string{"sealed"})
}
