package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/filter"
)

const testDir = "/state/snap"

// spec describes one generation of a test snapshot; its payload is a pure
// function of (ID, Shard, Count), so a test can recompute what it expects.
type spec struct {
	ID     uint64
	Shards uint32
	Count  uint64
	Final  bool
	Size   int
}

func payloadOf(id uint64, shard uint32, count uint64, size int) []byte {
	r := rand.New(rand.NewPCG(id<<32|uint64(shard), count))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// calls counts Payload calls per (ID, Shard). Write calls Payload from
// several goroutines: callsMu guards every calls map.
type calls map[[2]uint64]int

var callsMu sync.Mutex

func gens(specs []spec, c calls) []Generation {
	var out []Generation
	for _, s := range specs {
		for sh := uint32(0); sh < s.Shards; sh++ {
			s, sh := s, sh
			out = append(out, Generation{
				ID: s.ID, Shard: sh,
				Start: int64(s.ID) * 1e9, End: int64(s.ID+1) * 1e9,
				Count: s.Count, Kind: filter.Blocked, Final: s.Final,
				Payload: func() ([]byte, error) {
					if c != nil {
						callsMu.Lock()
						c[[2]uint64{s.ID, uint64(sh)}]++
						callsMu.Unlock()
					}
					return payloadOf(s.ID, sh, s.Count, s.Size), nil
				},
			})
		}
	}
	return out
}

func header(commitSeq uint64) Header {
	return Header{
		Seed:      0x5eed5eed5eed5eed,
		Options:   []byte("window=1h gens=4 shards=2 filter=blocked fp=0.01"),
		CommitSeq: commitSeq,
		Created:   1_700_000_000_000_000_000 + int64(commitSeq),
	}
}

// checkSnapshot checks s against what Write was given.
func checkSnapshot(t testing.TB, s *Snapshot, h Header, specs []spec) {
	t.Helper()
	checkSnapshotVersion(t, s, Version, h, specs)
}

// checkSnapshotVersion checks s, of format version v, against what Write was
// given.
func checkSnapshotVersion(t testing.TB, s *Snapshot, v uint32, h Header, specs []spec) {
	t.Helper()
	if s.Header.Version != v || s.Header.Seed != h.Seed || s.Header.CommitSeq != h.CommitSeq ||
		s.Header.Created != h.Created || !bytes.Equal(s.Header.Options, h.Options) {
		t.Fatalf("header %+v, want %+v", s.Header, h)
	}
	want := gens(specs, nil)
	if len(s.Generations) != len(want) {
		t.Fatalf("%d generations, want %d", len(s.Generations), len(want))
	}
	for i, g := range s.Generations {
		w := want[i]
		if g.ID != w.ID || g.Shard != w.Shard || g.Start != w.Start || g.End != w.End ||
			g.Count != w.Count || g.Kind != w.Kind || g.Final != w.Final {
			t.Fatalf("generation %d: %+v, want %+v", i, g.SegmentInfo, w)
		}
		p, _ := w.Payload()
		if !bytes.Equal(g.Payload, p) {
			t.Fatalf("generation %d shard %d: payload differs", g.ID, g.Shard)
		}
		if g.PayloadSize() != int64(len(p)) {
			t.Fatalf("generation %d: PayloadSize %d, want %d", g.ID, g.PayloadSize(), len(p))
		}
	}
}

func mustWrite(t testing.TB, fs vfs.FS, h Header, specs []spec, c calls) Info {
	t.Helper()
	info, err := Write(fs, testDir, h, gens(specs, c))
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if info.CleanupErr != nil {
		t.Fatalf("Write cleanup: %v", info.CleanupErr)
	}
	return info
}

func listDir(t testing.TB, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

var (
	specs1 = []spec{
		{ID: 1, Shards: 2, Count: 100, Final: true, Size: 3000},
		{ID: 2, Shards: 2, Count: 200, Final: true, Size: 5000},
		{ID: 3, Shards: 2, Count: 30, Final: false, Size: 9000},
	}
	specs2 = []spec{ // generation 3 final with more keys, 4 new
		{ID: 1, Shards: 2, Count: 100, Final: true, Size: 3000},
		{ID: 2, Shards: 2, Count: 200, Final: true, Size: 5000},
		{ID: 3, Shards: 2, Count: 300, Final: true, Size: 9000},
		{ID: 4, Shards: 2, Count: 7, Final: false, Size: 100},
	}
	specs3 = []spec{ // generation 1 expired
		{ID: 2, Shards: 2, Count: 200, Final: true, Size: 5000},
		{ID: 3, Shards: 2, Count: 300, Final: true, Size: 9000},
		{ID: 4, Shards: 2, Count: 70, Final: false, Size: 1000},
	}
)

func TestRoundTrip(t *testing.T) {
	fs := vfs.NewMem()
	h := header(41)
	info := mustWrite(t, fs, h, specs1, nil)
	if info.Version != Version || info.CommitSeq != 41 || len(info.Segments) != 6 || info.Reused != 0 {
		t.Fatalf("info %+v", info)
	}
	if info.Written != info.TotalSize {
		t.Fatalf("first write wrote %d bytes, total %d", info.Written, info.TotalSize)
	}
	s, err := Latest(fs, testDir)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, s, h, specs1)
	if s.Path != info.Path || len(s.Skipped) != 0 {
		t.Fatalf("path %q skipped %v", s.Path, s.Skipped)
	}
	s, err = Read(fs, info.Path)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, s, h, specs1)
	if err := Verify(fs, info.Path); err != nil {
		t.Fatal(err)
	}
	in, err := Inspect(fs, info.Path)
	if err != nil {
		t.Fatal(err)
	}
	in.Written, info.Written = 0, 0
	if fmt.Sprintf("%#v", in) != fmt.Sprintf("%#v", info) {
		t.Fatalf("Inspect\n%+v\nWrite\n%+v", in, info)
	}
	text := in.String()
	for _, want := range []string{"version 1", "commit seq 41", "6 segments", "gen 3 shard 1", "blocked", "final", "live", "segment-000001-3-1.seg"} {
		if !strings.Contains(text, want) {
			t.Errorf("Info.String lacks %q:\n%s", want, text)
		}
	}

	// No generations at all is a valid snapshot too.
	h2 := header(42)
	mustWrite(t, fs, h2, nil, nil)
	if s, err = Latest(fs, testDir); err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, s, h2, nil)
}

func TestReuseFinalSegments(t *testing.T) {
	fs := vfs.NewMem()
	c := calls{}
	mustWrite(t, fs, header(1), specs1, c)
	before := map[string][]byte{}
	for _, name := range listDir(t, fs, testDir) {
		before[name] = readFile(t, fs, fs.PathJoin(testDir, name))
	}

	c = calls{}
	info := mustWrite(t, fs, header(2), specs2, c)
	for _, id := range []uint64{1, 2} {
		for sh := uint64(0); sh < 2; sh++ {
			if c[[2]uint64{id, sh}] != 0 {
				t.Errorf("final generation %d shard %d: Payload called", id, sh)
			}
		}
	}
	for _, id := range []uint64{3, 4} {
		if c[[2]uint64{id, 0}] != 1 {
			t.Errorf("generation %d: Payload called %d times, want 1", id, c[[2]uint64{id, 0}])
		}
	}
	if info.Reused != 4 {
		t.Fatalf("reused %d segments, want 4", info.Reused)
	}
	var fresh int64
	for _, sg := range info.Segments {
		if sg.Reused {
			b, ok := before[sg.Name]
			if !ok || !bytes.Equal(b, readFile(t, fs, fs.PathJoin(testDir, sg.Name))) {
				t.Errorf("reused segment %s was rewritten", sg.Name)
			}
			if !strings.HasPrefix(sg.Name, "segment-000001-") {
				t.Errorf("reused segment named %s", sg.Name)
			}
		} else {
			fresh += sg.Size
			if _, ok := before[sg.Name]; ok {
				t.Errorf("fresh segment %s overwrote a file", sg.Name)
			}
		}
	}
	if info.Written != fresh+info.ManifestSize {
		t.Errorf("wrote %d bytes, want %d", info.Written, fresh+info.ManifestSize)
	}
	s, err := Latest(fs, testDir)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, s, header(2), specs2)

	// A third write of the same final generations reuses them again, now
	// from the second manifest.
	c = calls{}
	info = mustWrite(t, fs, header(3), specs2, c)
	if info.Reused != 6 || c[[2]uint64{4, 0}] != 1 || len(c) != 2 {
		t.Fatalf("reused %d, calls %v", info.Reused, c)
	}

	// A damaged final segment is not reused: it is written afresh.
	victim := info.Segments[0]
	p := fs.PathJoin(testDir, victim.Name)
	b := readFile(t, fs, p)
	b[len(b)-1] ^= 1
	writeFile(t, fs, p, b)
	c = calls{}
	info = mustWrite(t, fs, header(4), specs2, c)
	if c[[2]uint64{victim.ID, uint64(victim.Shard)}] != 1 || info.Segments[0].Reused {
		t.Fatalf("damaged segment reused: calls %v", c)
	}
	if s, err = Latest(fs, testDir); err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, s, header(4), specs2)

	// Metadata that changed under a Final flag is written afresh.
	changed := slices.Clone(specs2)
	changed[0].Count++
	c = calls{}
	mustWrite(t, fs, header(5), changed, c)
	if c[[2]uint64{1, 0}] != 1 {
		t.Fatalf("changed final generation reused: calls %v", c)
	}

	// Nothing is reused across a change of seed or options, whose filters
	// hash keys otherwise under the same metadata.
	for i, h := range []Header{header(6), header(7)} {
		if i == 0 {
			h.Seed++
		} else {
			h.Options = append(h.Options, " other"...)
		}
		mustWrite(t, fs, header(5+2*uint64(i)), specs2, calls{}) // a previous manifest to reuse from
		c = calls{}
		if info := mustWrite(t, fs, h, specs2, c); info.Reused != 0 || len(c) != 8 { // every shard of specs2
			t.Fatalf("header %+v: reused %d segments of another seed or options, calls %v", h, info.Reused, c)
		}
	}
}

// referenced returns the file names a manifest and its segments make up.
func referenced(t *testing.T, fs vfs.FS, path string) []string {
	in, err := Inspect(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{fs.PathBase(path)}
	for _, sg := range in.Segments {
		names = append(names, sg.Name)
	}
	return names
}

func TestCleanup(t *testing.T) {
	fs := vfs.NewMem()
	var paths []string
	for i, sp := range [][]spec{specs1, specs2, specs3, specs3[1:], nil} {
		info := mustWrite(t, fs, header(uint64(i+1)), sp, nil)
		paths = append(paths, info.Path)
		want := referenced(t, fs, info.Path)
		if i > 0 {
			want = append(want, referenced(t, fs, paths[i-1])...)
		}
		slices.Sort(want)
		want = slices.Compact(want)
		if got := listDir(t, fs, testDir); !slices.Equal(got, want) {
			t.Fatalf("write %d: directory holds\n%v\nwant\n%v", i+1, got, want)
		}
	}
	// The last snapshot is empty, so the directory holds two manifests and
	// the previous one's four segments.
	if got := listDir(t, fs, testDir); len(got) != 6 {
		t.Fatalf("directory holds %v", got)
	}
}

func TestSweepsTempFiles(t *testing.T) {
	fs := vfs.NewMem()
	mustWrite(t, fs, header(1), specs1, nil)
	stray := []string{"snapshot-000009.manifest.tmp", "segment-000008-3-1.seg.tmp"}
	for _, op := range []string{"Write", "Latest"} {
		for _, name := range stray {
			writeFile(t, fs, fs.PathJoin(testDir, name), []byte("partial"))
		}
		writeFile(t, fs, fs.PathJoin(testDir, "README"), []byte("not ours"))
		writeFile(t, fs, fs.PathJoin(testDir, "other.tmp"), []byte("not ours"))
		if op == "Write" {
			// Sequence numbers continue above the stray files'.
			info := mustWrite(t, fs, header(2), specs1, nil)
			if fs.PathBase(info.Path) != "snapshot-000010.manifest" {
				t.Errorf("new manifest %s", info.Path)
			}
		} else {
			s, err := Latest(fs, testDir)
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshot(t, s, header(2), specs1)
		}
		names := listDir(t, fs, testDir)
		for _, name := range stray {
			if slices.Contains(names, name) {
				t.Errorf("%s: %s not swept", op, name)
			}
		}
		if !slices.Contains(names, "README") || !slices.Contains(names, "other.tmp") {
			t.Errorf("%s: foreign files removed: %v", op, names)
		}
	}
}

func TestLatestFallsBack(t *testing.T) {
	for _, damage := range []string{"flip-manifest", "truncate-manifest", "remove-segment", "flip-segment"} {
		t.Run(damage, func(t *testing.T) {
			fs := vfs.NewMem()
			mustWrite(t, fs, header(1), specs1, nil)
			info := mustWrite(t, fs, header(2), specs2, nil)
			var victim string
			for _, sg := range info.Segments {
				if !sg.Reused {
					victim = fs.PathJoin(testDir, sg.Name)
				}
			}
			switch damage {
			case "flip-manifest":
				b := readFile(t, fs, info.Path)
				b[len(b)/2] ^= 0x10
				writeFile(t, fs, info.Path, b)
			case "truncate-manifest":
				b := readFile(t, fs, info.Path)
				writeFile(t, fs, info.Path, b[:len(b)-1])
			case "remove-segment":
				if err := fs.Remove(victim); err != nil {
					t.Fatal(err)
				}
			case "flip-segment":
				b := readFile(t, fs, victim)
				b[segHeadLen+10] ^= 1
				writeFile(t, fs, victim, b)
			}
			s, err := Latest(fs, testDir)
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshot(t, s, header(1), specs1)
			if len(s.Skipped) != 1 || !errors.Is(s.Skipped[0], ErrCorrupt) {
				t.Fatalf("skipped %v", s.Skipped)
			}
			if _, err := Read(fs, info.Path); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read of the damaged snapshot: %v", err)
			}
			if err := Verify(fs, info.Path); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Verify of the damaged snapshot: %v", err)
			}
			// A Write after the damage is based on the good snapshot and
			// leaves a readable state.
			mustWrite(t, fs, header(3), specs3, nil)
			s, err = Latest(fs, testDir)
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshot(t, s, header(3), specs3)
		})
	}
}

func TestLatestErrors(t *testing.T) {
	fs := vfs.NewMem()
	if _, err := Latest(fs, "/nowhere"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing directory: %v", err)
	}
	if err := fs.MkdirAll(testDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, fs, fs.PathJoin(testDir, "MANIFEST-000001"), []byte("a pebble manifest"))
	if _, err := Latest(fs, testDir); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty directory: %v", err)
	}
	// Only corrupt snapshots: ErrCorrupt, not ErrNotFound.
	writeFile(t, fs, fs.PathJoin(testDir, manifestName(1)), []byte("garbage garbage garbage"))
	_, err := Latest(fs, testDir)
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) {
		t.Fatalf("corrupt only: %v", err)
	}
	// A Write over it works and replaces it.
	mustWrite(t, fs, header(2), specs1, nil)
	s, err := Latest(fs, testDir)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, s, header(2), specs1)
}

func TestWriteRejectsBadInput(t *testing.T) {
	fs := vfs.NewMem()
	mustWrite(t, fs, header(1), specs1, nil)
	before := listDir(t, fs, testDir)
	boom := errors.New("boom")
	dup := gens(specs1, nil)
	dup = append(dup, dup[0])
	noPayload := gens(specs1, nil)
	noPayload[2].Payload = nil
	failing := gens(specs2, nil)
	failing[len(failing)-1].Payload = func() ([]byte, error) { return nil, boom }
	big := header(2)
	big.Options = make([]byte, MaxOptionsSize+1)
	for _, tc := range []struct {
		name string
		h    Header
		g    []Generation
		want error
	}{
		{"duplicate", header(2), dup, nil},
		{"nil-payload", header(2), noPayload, nil},
		{"payload-error", header(2), failing, boom},
		{"options-too-large", big, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Write(fs, testDir, tc.h, tc.g)
			if err == nil || !strings.HasPrefix(err.Error(), "snapshot: ") {
				t.Fatalf("err %v", err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err %v does not wrap %v", err, tc.want)
			}
			if got := listDir(t, fs, testDir); !slices.Equal(got, before) {
				t.Fatalf("directory changed:\n%v\n%v", got, before)
			}
			s, err := Latest(fs, testDir)
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshot(t, s, header(1), specs1)
		})
	}
}

func readFile(t testing.TB, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && len(b) > 0 {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(slices.Clone(b)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
