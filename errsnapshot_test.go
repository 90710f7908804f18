package dedup_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/streamdedup/dedup"
)

// TestCloseSnapshotError: a last snapshot that Close cannot write (a full
// disk under the snapshots folder) is told apart with ErrSnapshot, and the
// commits before it hold: the next Open has every committed key.
func TestCloseSnapshotError(t *testing.T) {
	mem := vfs.NewMem()
	var full atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && strings.Contains(op.Path, dedup.SnapshotDir) && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return syscall.ENOSPC
		}
		return nil
	})
	o := dedup.Options{Dir: "/s", FS: errorfs.Wrap(mem, inj), SnapshotInterval: 1 << 40}
	e, err := dedup.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Observe([]byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := e.Commit(nil); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	err = e.Close()
	if !errors.Is(err, dedup.ErrSnapshot) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close: %v, want ErrSnapshot wrapping ENOSPC", err)
	}
	full.Store(false)
	e, err = dedup.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if v, err := e.Observe([]byte("k")); err != nil || v != dedup.Duplicate {
		t.Fatalf("after reopen: %v, %v; want Duplicate", v, err)
	}
}
