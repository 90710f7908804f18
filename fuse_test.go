package dedup_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/internal/testclock"
)

// TestFuseSeals: with Filter "fuse" and a state directory, every
// generation older than the newest is sealed into a fuse filter, the
// newest generation's hashes wait in one spool file a shard (and the files
// of sealed or expired generations are gone); a snapshot holds the fuse
// filters, a reopen restores them (the newest generation stays blocked: it
// has no spool), the generations made after it are sealed in turn, and no
// key committed less than a window ago is forgotten, in both modes.
func TestFuseSeals(t *testing.T) {
	const gens, shards, perGen = 4, 4, 3000
	span := time.Hour
	for _, prob := range []bool{true, false} {
		t.Run(fmt.Sprintf("prob=%v", prob), func(t *testing.T) {
			mem := vfs.NewMem()
			clk := testclock.New(t0)
			opts := Options{Dir: "/f", FS: mem, Filter: "fuse", Probabilistic: prob, Window: gens * span, Generations: gens,
				Shards: shards, ExpectedRate: perGen / span.Seconds(), Now: clk.Now, SnapshotInterval: -1}
			e := openT(t, opts)
			type key struct {
				k  []byte
				at time.Time
			}
			var held []key
			n := 0
			feed := func(e *Engine, generations int) {
				for range generations {
					for part := range 10 {
						batch := make([][]byte, perGen/10)
						for i := range batch {
							batch[i] = fmt.Appendf(nil, "k%d", n)
							n++
						}
						out := make([]Verdict, len(batch))
						if err := e.ObserveBatch(batch, out); err != nil {
							t.Fatal(err)
						}
						mustCommit(t, e, "")
						for i, v := range out {
							if v == New {
								held = append(held, key{batch[i], clk.Now()})
							}
						}
						_ = part
						clk.Advance(span / 10)
					}
				}
			}
			check := func(e *Engine, what string) {
				t.Helper()
				for _, k := range held {
					if clk.Now().Sub(k.at) >= gens*span {
						continue
					}
					if v, err := e.Peek(k.k); err != nil || v != Duplicate {
						t.Fatalf("%s: key %s committed %v ago: %v, %v", what, k.k, clk.Now().Sub(k.at), v, err)
					}
				}
			}
			sealedKinds := func(e *Engine, what string) {
				t.Helper()
				for s, kinds := range GenerationKinds(e) {
					for i, k := range kinds {
						want := filter.Fuse
						if i == len(kinds)-1 {
							want = filter.Blocked
						}
						if k != want {
							t.Fatalf("%s: shard %d generation %d of %d is %v, want %v (%v)", what, s, i, len(kinds), k, want, kinds)
						}
					}
				}
			}
			spools := func(what string, most int) {
				t.Helper()
				names, err := mem.List("/f/" + SpoolDir)
				if err != nil {
					t.Fatal(err)
				}
				if len(names) > most {
					t.Fatalf("%s: %d spool files (%s), want at most %d", what, len(names), strings.Join(names, " "), most)
				}
			}
			// fill feeds n generations, moves past the end of the last one
			// and makes the next one, which seals those before; then checks
			// them.
			fill := func(e *Engine, n int, probe, what string) {
				t.Helper()
				feed(e, n)
				clk.Advance(time.Minute)
				// A probe no filter holds: about one in a hundred is a
				// false match of the fuse filters in probabilistic mode.
				for i := 0; ; i++ {
					if v, err := e.Peek([]byte(probe)); err != nil || v == New {
						break
					}
					probe = fmt.Sprintf("%s-%d", probe, i)
				}
				mustObserve(t, e, probe, New)
				mustCommit(t, e, "")                // makes the next generation
				mustObserve(t, e, probe, Duplicate) // seals the one before
				sealedKinds(e, what)
				spools(what, shards)
				check(e, what)
			}
			fill(e, 2*gens, "probe-seal", "after two windows")
			feed(e, 1)
			st := e.Stats()
			t.Logf("%d filter bytes for %d keys a window: %.3f a key (spools on disk)", st.FilterBytes, gens*perGen, float64(st.FilterBytes)/float64(gens*perGen))
			if err := e.Snapshot(); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = openT(t, opts)
			if st := e.Stats(); st.RestoredFrom != "snapshot" {
				t.Fatalf("reopened from %q", st.RestoredFrom)
			}
			spools("after the reopen", 0)
			sealedKinds(e, "after the reopen")
			check(e, "after the reopen")
			fill(e, gens+1, "probe-seal-2", "a window after the reopen")
			// From the log or the store alone: generations rebuilt are
			// spooled again and sealed.
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if prob {
				return // the log was truncated at the snapshot
			}
			o := opts
			o.IgnoreSnapshots = true
			e = openT(t, o)
			clk.Advance(time.Second)
			// Every shard seals what is due at its next operation.
			probes := make([][]byte, 64*shards)
			for i := range probes {
				probes[i] = fmt.Appendf(nil, "probe-%d", i)
			}
			if err := e.ObserveBatch(probes, make([]Verdict, len(probes))); err != nil {
				t.Fatal(err)
			}
			sealedKinds(e, "rebuilt from the store")
			check(e, "rebuilt from the store")
		})
	}
}

// TestFuseNeedsDir: Filter fuse without a Dir is refused by name.
func TestFuseNeedsDir(t *testing.T) {
	_, err := Open(Options{Filter: "fuse"})
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "Filter") || !strings.Contains(err.Error(), "Dir") {
		t.Fatalf("Open(Filter fuse, no Dir) = %v, want ErrInvalidOptions naming Filter and Dir", err)
	}
}

// TestFuseCloseDropsSpools: Close left the newest generation's spool
// files open and on disk (8 bytes a key, one file a shard): a program that
// opens and closes engines (dedup kafka, at each rebalance) leaked their
// descriptors, and a finished `dedup filter` left them in DIR/spool.
func TestFuseCloseDropsSpools(t *testing.T) {
	mem := vfs.NewMem()
	clk := testclock.New(t0)
	opts := Options{Dir: "/f", FS: mem, Filter: "fuse", Window: time.Hour, Shards: 4, Now: clk.Now}
	e := openT(t, opts)
	for i := range 1000 {
		mustObserve(t, e, fmt.Sprintf("k%d", i), New)
	}
	mustCommit(t, e, "")
	if names, err := mem.List("/f/" + SpoolDir); err != nil || len(names) == 0 {
		t.Fatalf("spool folder before Close: %v, %v; want a file a shard", names, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if names, err := mem.List("/f/" + SpoolDir); err != nil || len(names) != 0 {
		t.Fatalf("spool folder after Close: %v, %v; want it empty", names, err)
	}
	e = openT(t, opts)
	mustObserve(t, e, "k1", Duplicate)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFuseSpoolFailureLogged: a spool that could not be made or written
// (a full disk under DIR/spool) left its generation unsealed, at the
// blocked filter's memory, without a word: `dedup filter --stats` looked
// like a run that sealed. It is logged now, once a generation, and no
// committed key is lost.
func TestFuseSpoolFailureLogged(t *testing.T) {
	for name, kind := range map[string]errorfs.OpKind{"create": errorfs.OpCreate, "write": errorfs.OpFileWrite} {
		t.Run(name, func(t *testing.T) {
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind == kind && strings.Contains(op.Path, "/"+SpoolDir+"/") {
					return errorfs.ErrInjected
				}
				return nil
			})
			var logged logLines
			clk := testclock.New(t0)
			opts := Options{Dir: "/f", FS: errorfs.Wrap(vfs.NewMem(), inj), Filter: "fuse", Window: time.Hour, Shards: 2,
				Now: clk.Now, Logf: logged.logf}
			e := openT(t, opts)
			const n = 20000 // over a 16 KiB spool buffer a shard
			for i := range n {
				mustObserve(t, e, fmt.Sprintf("k%d", i), New)
			}
			mustCommit(t, e, "")
			for i := range n {
				mustObserve(t, e, fmt.Sprintf("k%d", i), Duplicate)
			}
			spoolLogs := logged.containing("spool")
			if len(spoolLogs) != 1 || !strings.Contains(spoolLogs[0], errorfs.ErrInjected.Error()) {
				t.Fatalf("spool failures logged: %q, want one line with the error", spoolLogs)
			}
		})
	}
}
