package snapshot

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/streamdedup/dedup/internal/faultfs"
)

// crashScenario is a sequence of Writes; the last one is crashed.
type crashScenario struct {
	name   string
	before [][]spec // written successfully first
	last   []spec
}

var crashScenarios = []crashScenario{
	{"first-write", nil, specs1},
	{"second-write-reuses", [][]spec{specs1}, specs2},
	{"third-write-expires", [][]spec{specs1, specs2}, specs3},
}

// checkOldOrNew checks that Latest on fs returns either the snapshot of the
// writes before (old, if any) or the last one, fully valid, and that the
// directory accepts a further Write.
func checkOldOrNew(t *testing.T, fs vfs.FS, sc crashScenario, allowNew bool) {
	t.Helper()
	n := uint64(len(sc.before))
	s, err := Latest(fs, testDir)
	switch {
	case err != nil && n == 0 && errors.Is(err, ErrNotFound):
	case err != nil:
		t.Fatalf("Latest: %v\n%s", err, fs.(interface{ String() string }).String())
	case s.Header.CommitSeq == n+1 && allowNew:
		checkSnapshot(t, s, header(n+1), sc.last)
	case s.Header.CommitSeq == n && n > 0:
		checkSnapshot(t, s, header(n), sc.before[n-1])
	default:
		t.Fatalf("Latest returned commit seq %d after %d writes (new allowed: %v)", s.Header.CommitSeq, n, allowNew)
	}
	if s != nil && len(s.Skipped) != 0 {
		// A crash never leaves a corrupt manifest: manifests are renamed
		// into place only once complete and synced.
		t.Fatalf("crash left a corrupt snapshot: %v", s.Skipped)
	}
	// Recovery: the directory takes the next snapshot.
	mustWrite(t, fs, header(n+7), specs2, nil)
	s, err = Latest(fs, testDir)
	if err != nil {
		t.Fatalf("Latest after recovery write: %v", err)
	}
	checkSnapshot(t, s, header(n+7), specs2)
	for _, name := range listDir(t, fs, testDir) {
		if strings.HasSuffix(name, tmpSuffix) {
			t.Fatalf("temporary file %s left", name)
		}
	}
}

// TestCrashAtEveryWriteOp crashes a Write at its k-th mutating operation
// (create, write, sync, rename, remove...) for every k, keeping either only
// synced data or a random part of the unsynced data, and checks that the
// crashed state holds the old or the new snapshot.
func TestCrashAtEveryWriteOp(t *testing.T) {
	cfgs := []struct {
		name    string
		percent int
		seeds   int
	}{{"synced-only", 0, 1}, {"unsynced-50", 50, 4}, {"unsynced-90", 90, 2}}
	for _, sc := range crashScenarios {
		for _, cfg := range cfgs {
			t.Run(sc.name+"/"+cfg.name, func(t *testing.T) {
				for seed := 0; seed < cfg.seeds; seed++ {
					for k := 0; ; k++ {
						if !crashAt(t, sc, k, vfs.CrashCloneCfg{
							UnsyncedDataPercent: cfg.percent,
							RNG:                 rand.New(rand.NewPCG(uint64(seed), uint64(k))),
						}) {
							break
						}
						if k > 1000 {
							t.Fatal("Write never finished")
						}
					}
				}
			})
		}
	}
}

// crashAt runs the scenario, crashing at the k-th mutating op of its last
// Write; it reports false if the Write finished before op k.
func crashAt(t *testing.T, sc crashScenario, k int, cfg vfs.CrashCloneCfg) bool {
	mem := vfs.NewCrashableMem()
	for i, sp := range sc.before {
		mustWrite(t, mem, header(uint64(i+1)), sp, nil)
	}
	crash := faultfs.NewCrash(mem, errorfs.OnIndex(int32(k)), cfg)
	_, err := Write(errorfs.Wrap(mem, crash), testDir, header(uint64(len(sc.before)+1)), gens(sc.last, nil))
	crashed, crashOp := crash.Crashed()
	if crashed == nil {
		if err != nil {
			t.Fatalf("Write without a crash: %v", err)
		}
		// Crash right after Write returned: the new snapshot must be there.
		crashed = mem.CrashClone(cfg)
		s, err := Latest(crashed, testDir)
		if err != nil || s.Header.CommitSeq != uint64(len(sc.before)+1) {
			t.Fatalf("crash after a completed Write: %v", err)
		}
		checkOldOrNew(t, crashed, sc, true)
		return false
	}
	t.Run(fmt.Sprintf("op%d-%s-%s", k, opName(crashOp.Kind), crashOp.Path), func(t *testing.T) {
		checkOldOrNew(t, crashed, sc, true)
	})
	return true
}

// TestErrorAtEveryOp injects an I/O error at the k-th filesystem operation of
// a Write, for every k: either Write fails with that error and nothing of it
// is left behind (Latest returns the previous snapshot), or the failure did
// not touch the new snapshot (a read it could do without, or a cleanup).
func TestErrorAtEveryOp(t *testing.T) {
	enospc := fmt.Errorf("injected: %w", syscall.ENOSPC)
	for _, sc := range crashScenarios {
		for _, mode := range []string{"ErrInjected", "ENOSPC"} {
			t.Run(sc.name+"/"+mode, func(t *testing.T) {
				for k := 0; ; k++ {
					mem := vfs.NewMem()
					for i, sp := range sc.before {
						mustWrite(t, mem, header(uint64(i+1)), sp, nil)
					}
					if len(sc.before) == 0 {
						if err := mem.MkdirAll(testDir, 0o755); err != nil {
							t.Fatal(err)
						}
					}
					before := listDir(t, mem, testDir)
					var inj errorfs.Injector
					var want error
					var fired func() bool
					if mode == "ErrInjected" {
						idx := errorfs.OnIndex(int32(k))
						inj, want = idx, errorfs.ErrInjected
						fired = func() bool { return idx.Load() < 0 }
					} else {
						// Disk full: the k-th write of data fails.
						idx := errorfs.OnIndex(int32(k))
						inj, want = faultfs.If(errorfs.And(fileWrites, idx), enospc), syscall.ENOSPC
						fired = func() bool { return idx.Load() < 0 }
					}
					info, err := Write(errorfs.Wrap(mem, inj), testDir, header(uint64(len(sc.before)+1)), gens(sc.last, nil))
					if !fired() {
						if err != nil {
							t.Fatal(err)
						}
						if k == 0 {
							t.Fatal("no operation to fail")
						}
						return
					}
					s, lerr := Latest(mem, testDir)
					if err != nil {
						if !errors.Is(err, want) || !strings.HasPrefix(err.Error(), "snapshot: ") {
							t.Fatalf("op %d: error %v does not wrap %v", k, err, want)
						}
						if got := listDir(t, mem, testDir); !slices.Equal(got, before) {
							t.Fatalf("op %d: failed Write left files:\n%v\nbefore:\n%v", k, got, before)
						}
						if len(sc.before) == 0 {
							if !errors.Is(lerr, ErrNotFound) {
								t.Fatalf("op %d: Latest: %v", k, lerr)
							}
						} else {
							if lerr != nil {
								t.Fatalf("op %d: Latest: %v", k, lerr)
							}
							n := len(sc.before)
							checkSnapshot(t, s, header(uint64(n)), sc.before[n-1])
						}
						continue
					}
					// The error hit a cleanup or an optional read.
					if info.CleanupErr != nil && !errors.Is(info.CleanupErr, want) {
						t.Fatalf("op %d: cleanup error %v", k, info.CleanupErr)
					}
					if lerr != nil {
						t.Fatalf("op %d: Latest: %v", k, lerr)
					}
					checkSnapshot(t, s, header(uint64(len(sc.before)+1)), sc.last)
				}
			})
		}
	}
}

func opName(k errorfs.OpKind) string {
	switch k {
	case errorfs.OpCreate:
		return "create"
	case errorfs.OpRename:
		return "rename"
	case errorfs.OpRemove:
		return "remove"
	case errorfs.OpMkdirAll:
		return "mkdir"
	case errorfs.OpFileWrite:
		return "write"
	case errorfs.OpFileSync:
		return "sync"
	}
	return fmt.Sprintf("op%d", int(k))
}

// fileWrites selects the operations that write file data.
var fileWrites errorfs.Predicate = opKind(errorfs.OpFileWrite)

// opKind is an errorfs predicate selecting one kind of operation.
type opKind errorfs.OpKind

func (k opKind) String() string              { return fmt.Sprintf("(OpKind %d)", int(k)) }
func (k opKind) Evaluate(op errorfs.Op) bool { return op.Kind == errorfs.OpKind(k) }
