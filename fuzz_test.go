package dedup_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/exact"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/testclock"
)

// optionFields are the names Validate may use.
var optionFields = []string{"Window", "ExpectedRate", "FalsePositiveRate", "Filter", "Generations", "Shards",
	"AutoCommit", "MaxInFlight", "SnapshotInterval", "MaxKeySize"}

// FuzzOptions: Open with arbitrary option values never panics; a rejection
// wraps ErrInvalidOptions and names every field it rejects, including each
// field that is out of its documented range; an accepted engine works.
func FuzzOptions(f *testing.F) {
	f.Add(int64(0), 0.0, 0.0, "", 0, 0, int64(0), 0, int64(0), 0, false)
	f.Add(int64(time.Minute), 100.0, 0.01, "bloom", 4, 2, int64(0), 10, int64(0), 16, false)
	f.Add(int64(-1), -5.0, 1.5, "xor", -1, 1<<20, int64(-1), -1, int64(-1), -1, true)
	f.Add(int64(time.Millisecond), math.NaN(), math.Inf(1), "cuckoo", 8, 4096, int64(time.Millisecond), 1, int64(time.Second), 1<<20, true)
	f.Add(int64(1), 1e12, 1e-300, "blocked", 1024, 1, int64(1), 1<<40, int64(1), 1<<21, false)
	f.Add(int64(time.Hour), 1000.0, 0.01, "fuse", 4, 2, int64(0), 10, int64(0), 16, true)
	f.Fuzz(func(t *testing.T, window int64, rate, fp float64, kind string, gens, shards int, autoCommit int64,
		maxInFlight int, snapInt int64, maxKey int, prob bool) {
		o := Options{Window: time.Duration(window), ExpectedRate: rate, FalsePositiveRate: fp, Filter: kind,
			Generations: gens, Shards: shards, AutoCommit: time.Duration(autoCommit), MaxInFlight: maxInFlight,
			SnapshotInterval: time.Duration(snapInt), MaxKeySize: maxKey, Probabilistic: prob}
		// Background loops faster than 1ms would only burn the fuzzer's time.
		if o.AutoCommit > 0 && o.AutoCommit < time.Millisecond {
			o.AutoCommit = time.Millisecond
		}
		if o.SnapshotInterval > 0 && o.SnapshotInterval < time.Millisecond {
			o.SnapshotInterval = time.Millisecond
		}
		var must []string // fields outside their documented range
		if window < 0 {
			must = append(must, "Window")
		}
		if rate < 0 || math.IsNaN(rate) || rate > 1e12 {
			must = append(must, "ExpectedRate")
		}
		if fp < 0 || fp >= 1 || math.IsNaN(fp) {
			must = append(must, "FalsePositiveRate")
		}
		if kind != "" && kind != "bloom" && kind != "cuckoo" && kind != "blocked" && kind != "interleaved" && kind != "wide" && kind != "fuse" {
			must = append(must, "Filter")
		}
		if gens < 0 || gens > 1024 {
			must = append(must, "Generations")
		}
		if shards < 0 || shards > 1<<12 {
			must = append(must, "Shards")
		}
		if autoCommit < 0 {
			must = append(must, "AutoCommit")
		}
		if maxInFlight < 0 {
			must = append(must, "MaxInFlight")
		}
		if maxKey < 0 || maxKey > exact.MaxKeySize {
			must = append(must, "MaxKeySize") // one limit: what the store holds
		}
		e, err := Open(o)
		if err != nil {
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Open(%+v) = %v, not an ErrInvalidOptions", o, err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				named := false
				for _, f := range optionFields {
					named = named || strings.Contains(line, f)
				}
				if !named {
					t.Fatalf("Open(%+v): %q names no field", o, line)
				}
			}
			for _, f := range must {
				if !strings.Contains(err.Error(), f) {
					t.Fatalf("Open(%+v) = %v, does not name %s", o, err, f)
				}
			}
			return
		}
		defer func() {
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
		}()
		if len(must) > 0 {
			t.Fatalf("Open(%+v) accepted out-of-range %v", o, must)
		}
		// Use it, unless its filters would be huge (see the report: an
		// enormous ExpectedRate*Window is accepted and allocated lazily).
		eo := EngineOptions(e)
		span := eo.Window / time.Duration(eo.Generations)
		capacity := uint64(eo.ExpectedRate*span.Seconds()/float64(eo.Shards)) + 1
		size, err := filter.EstimateBytes(EngineKind(e), max(capacity, 64), eo.FalsePositiveRate/float64(eo.Generations+1))
		if err != nil || size > 32<<20 {
			return
		}
		// A key as long as MaxKeySize is accepted and commits; one byte
		// more is refused and never enters in flight.
		key := bytes.Repeat([]byte("k"), eo.MaxKeySize)
		if v, err := e.Observe(key); err != nil || v != New {
			t.Fatalf("Observe of a key of MaxKeySize on a fresh engine: %v, %v", v, err)
		}
		if _, err := e.Observe(append(key, 'k')); !errors.Is(err, ErrKeyTooLarge) {
			t.Fatalf("Observe of a key over MaxKeySize: %v, want ErrKeyTooLarge", err)
		}
		// A background commit (AutoCommit, here at least every
		// millisecond) may have taken the key already.
		if n := e.Stats().InFlightKeys; n != 1 && (eo.AutoCommit == 0 || n != 0) {
			t.Fatalf("InFlightKeys %d, want 1 (AutoCommit %v)", n, eo.AutoCommit)
		}
		mustCommit(t, e, "cp")
		if v, err := e.Observe(key); err != nil || v != Duplicate {
			t.Fatalf("Observe after Commit: %v, %v", v, err)
		}
	})
}

// FuzzObserveBatch: arbitrary keys (data split at sep) never panic a batch;
// a bad entry fails the whole batch naming its index and observes nothing;
// otherwise each distinct key is New once and InFlight after, and after a
// Commit every key of the batch is Duplicate, in a batch or alone.
func FuzzObserveBatch(f *testing.F) {
	f.Add([]byte("a,b,c,a,b"), byte(','))
	f.Add([]byte("a,,b"), byte(','))
	f.Add([]byte("0123456789abcdefXYZ,x"), byte(','))
	f.Add([]byte{0, 0, 1, 0, 0xff, 0, 0xff}, byte(0))
	f.Add([]byte(""), byte('x'))
	f.Fuzz(func(t *testing.T, data []byte, sep byte) {
		const maxKey = 16
		var keys [][]byte
		if len(data) > 0 {
			keys = bytes.Split(data, []byte{sep})
		}
		if len(keys) > 512 {
			keys = keys[:512]
		}
		for _, prob := range []bool{false, true} {
			e, err := Open(Options{MaxKeySize: maxKey, Shards: 4, Probabilistic: prob, ExpectedRate: 100})
			if err != nil {
				t.Fatal(err)
			}
			out := make([]Verdict, len(keys))
			err = e.ObserveBatch(keys, out)
			bad := -1
			for i, k := range keys {
				if len(k) == 0 || len(k) > maxKey {
					bad = i
					break
				}
			}
			if bad >= 0 {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("entry %d", bad)) ||
					!(errors.Is(err, ErrEmptyKey) || errors.Is(err, ErrKeyTooLarge)) {
					t.Fatalf("batch with bad entry %d: %v", bad, err)
				}
				for i, v := range out {
					if v != 0 {
						t.Fatalf("rejected batch observed entry %d", i)
					}
				}
				if st := e.Stats(); st.Observed != 0 || st.InFlightKeys != 0 {
					t.Fatalf("rejected batch left stats %+v", st)
				}
				_ = e.Close()
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for i, k := range keys {
				want := New
				if seen[string(k)] {
					want = InFlight
				}
				seen[string(k)] = true
				if out[i] != want {
					t.Fatalf("prob=%v entry %d %q: %v, want %v", prob, i, k, out[i], want)
				}
			}
			if st := e.Stats(); st.InFlightKeys != int64(len(seen)) {
				t.Fatalf("InFlightKeys %d, %d distinct keys", st.InFlightKeys, len(seen))
			}
			if err := e.Commit(nil); err != nil {
				t.Fatal(err)
			}
			if err := e.ObserveBatch(keys, out); err != nil {
				t.Fatal(err)
			}
			for i, k := range keys {
				if out[i] != Duplicate {
					t.Fatalf("prob=%v after Commit, entry %d %q: %v", prob, i, k, out[i])
				}
				if v, err := e.Observe(k); err != nil || v != Duplicate {
					t.Fatalf("prob=%v after Commit, Observe(%q): %v, %v", prob, k, v, err)
				}
				if err := e.Forget(k); !errors.Is(err, ErrNotInFlight) {
					t.Fatalf("Forget of a committed key: %v", err)
				}
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// snapTemplate is an exact-mode state with keys committed before, between
// and after two snapshots, built once for FuzzSnapshotOpen.
var snapTemplate struct {
	once  sync.Once
	fs    *vfs.MemFS
	opts  Options
	keys  []string
	files []string // the snapshot folder, sorted: newest manifest last
	err   error
}

func snapState() error {
	t := &snapTemplate
	t.once.Do(func() {
		t.fs = vfs.NewMem()
		clk := testclock.New(t0)
		t.opts = Options{Dir: "/s", FS: t.fs, Window: time.Hour, Generations: 4, Shards: 2, ExpectedRate: 1, Now: clk.Now}
		e, err := Open(t.opts)
		if err != nil {
			t.err = err
			return
		}
		for round := 0; round < 4; round++ {
			for i := 0; i < 40; i++ {
				k := fmt.Sprintf("r%d-%d", round, i)
				if v, err := e.Observe([]byte(k)); err != nil || v != New {
					t.err = fmt.Errorf("observe %s: %v %v", k, v, err)
					return
				}
				t.keys = append(t.keys, k)
			}
			if err := e.Commit(fmt.Appendf(nil, "%d", round)); err != nil {
				t.err = err
				return
			}
			clk.Advance(10 * time.Minute)
			if round == 1 || round == 2 {
				if err := e.Snapshot(); err != nil {
					t.err = err
					return
				}
			}
		}
		if err := e.Close(); err != nil {
			t.err = err
			return
		}
		names, err := t.fs.List("/s/" + SnapshotDir)
		if err != nil {
			t.err = err
			return
		}
		sort.Slice(names, func(i, j int) bool {
			// Segments first, then manifests; by name within each.
			mi, mj := strings.HasSuffix(names[i], ".manifest"), strings.HasSuffix(names[j], ".manifest")
			if mi != mj {
				return mj
			}
			return names[i] < names[j]
		})
		t.files = names
	})
	return t.err
}

func readFile(fs vfs.FS, path string) []byte {
	f, err := fs.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(f)
	return buf.Bytes()
}

// FuzzSnapshotOpen replaces one file of the snapshot folder (by default the
// newest manifest; which counts back from it) with fuzz bytes and opens the
// state in exact mode: Open never panics, never fails, and loses no
// committed key; the checkpoint is intact.
func FuzzSnapshotOpen(f *testing.F) {
	if err := snapState(); err != nil {
		f.Fatal(err)
	}
	tm := &snapTemplate
	newest := readFile(tm.fs, "/s/"+SnapshotDir+"/"+tm.files[len(tm.files)-1])
	older := readFile(tm.fs, "/s/"+SnapshotDir+"/"+tm.files[len(tm.files)-2])
	seg := readFile(tm.fs, "/s/"+SnapshotDir+"/"+tm.files[0])
	f.Add(newest, uint8(0))
	f.Add(newest[:len(newest)/2], uint8(0))
	f.Add(older, uint8(0)) // the older, valid manifest under the newest name
	flipped := bytes.Clone(newest)
	flipped[len(flipped)/3] ^= 1
	f.Add(flipped, uint8(0))
	f.Add([]byte{}, uint8(0))
	f.Add(seg, uint8(2))
	f.Add(seg[:len(seg)-1], uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		fs := vfs.NewMem()
		if _, err := vfs.Clone(tm.fs, fs, "/s", "/s"); err != nil {
			t.Fatal(err)
		}
		name := tm.files[len(tm.files)-1-int(which)%len(tm.files)]
		path := "/s/" + SnapshotDir + "/" + name
		w, err := fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		o := tm.opts
		o.FS = fs
		clk := testclock.New(t0.Add(40 * time.Minute))
		o.Now = clk.Now
		e, err := Open(o)
		if err != nil {
			t.Fatalf("Open with %s replaced (%d bytes): %v", name, len(data), err)
		}
		defer e.Close()
		for _, k := range tm.keys {
			if v, err := e.Observe([]byte(k)); err != nil || v != Duplicate {
				t.Fatalf("with %s replaced (%d bytes), restored from %q: committed key %q is %v, %v",
					name, len(data), e.Stats().RestoredFrom, k, v, err)
			}
		}
		if cp := string(e.Checkpoint()); cp != "3" {
			t.Fatalf("with %s replaced: Checkpoint %q", name, cp)
		}
	})
}
