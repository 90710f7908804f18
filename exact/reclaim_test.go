package exact

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestReclaimGivesSpaceBack: keys of expired generations are range-deleted
// by a commit, and Reclaim compacts them away, so the store's disk use falls
// back to the live generations' (before Reclaim existed, it never did: the
// soak's disk use grew with everything ever written).
func TestReclaimGivesSpaceBack(t *testing.T) {
	s, err := Open(t.TempDir(), Options{MemTableSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := make([]byte, 16)
	for gen := uint64(1); gen <= 5; gen++ {
		for c := 0; c < 5; c++ {
			b := s.NewBatch()
			for i := 0; i < 20000; i++ {
				binary.LittleEndian.PutUint64(key, gen<<32|uint64(c*20000+i))
				binary.LittleEndian.PutUint64(key[8:], 0x9e3779b97f4a7c15*uint64(i))
				b.Add(gen, key, uint64(i))
			}
			if _, err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.flushAll(); err != nil {
		t.Fatal(err)
	}
	// The disk taken by keys (the log records stay until TruncateLog).
	tables := func() uint64 {
		n, err := s.db.EstimateDiskUsage(tagGen(tagFP, 0), fpEnd)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	full := tables()
	if full < 100000*16 {
		t.Fatalf("key tables of %d bytes for 100000 keys of 16 bytes", full)
	}
	b := s.NewBatch()
	b.DropGenerationsBefore(5)
	if _, err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Reclaim(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := tables()
	t.Logf("key tables: %d bytes with 5 generations, %d after expiring 4 and Reclaim", full, after)
	if after*4 > full {
		t.Fatalf("Reclaim left %d of %d bytes after 4 of 5 generations expired", after, full)
	}
	n := 0
	if err := s.ScanFingerprints(0, func(gen uint64, _ Fingerprint) error {
		if gen < 5 {
			t.Fatalf("key of expired generation %d survived", gen)
		}
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 100000 {
		t.Fatalf("%d live keys, want 100000", n)
	}
	if err := s.Reclaim(context.Background()); err != nil { // nothing new to do
		t.Fatal(err)
	}
}

// TestReclaimDuringFlush: a Reclaim that runs while a flush of keys of the
// generations it reclaims is under way leaves nothing of them behind (a
// flush that ingested them after the excision kept their tables and
// filters until the next rise of the floor). The flush is held up at its
// first table while the drop commits and Reclaim starts.
func TestReclaimDuringFlush(t *testing.T) {
	mem := vfs.NewMem()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var armed sync.Mutex
	arm := false
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		armed.Lock()
		a := arm
		armed.Unlock()
		if a && op.Kind == errorfs.OpCreate && strings.Contains(op.Path, ingestPrefix) {
			once.Do(func() {
				close(entered)
				<-release
			})
		}
		return nil
	})
	s := mustOpen(t, "db", Options{FS: errorfs.Wrap(mem, inj), memLimit: 1})
	defer mustClose(t, s)
	armed.Lock()
	arm = true
	armed.Unlock()
	commitRange(t, s, 1, 0, 100, nil) // freezes: its flush starts and waits
	<-entered
	b := s.NewBatch()
	b.DropGenerationsBefore(2)
	b.Add(2, keyOf(1000), hashOf(1000))
	if _, err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	reclaimed := make(chan error, 1)
	go func() { reclaimed <- s.Reclaim(context.Background()) }()
	// Give Reclaim the time to run ahead of the flush if it can (it must
	// not): the test cannot fail falsely for a slow Reclaim, only miss the
	// bug.
	select {
	case err := <-reclaimed:
		reclaimed <- err
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-reclaimed; err != nil {
		t.Fatal(err)
	}
	if err := s.flushAll(); err != nil {
		t.Fatal(err)
	}
	if gens := s.filters.gens(); len(gens) > 0 && gens[0] < 2 {
		t.Fatalf("filters of generations %v after Reclaim below 2", gens)
	}
	n, err := s.db.EstimateDiskUsage(tagGen(tagFP, 0), tagGen(tagFP, 2))
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d bytes of key tables of generation 1 after Reclaim", n)
	}
}
