package exact

import (
	"context"
	"encoding/binary"
	"testing"
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
		n, err := s.db.EstimateDiskUsage(genPrefix(0), keysEnd)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	full := tables()
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
	if err := s.ScanKeys(0, func(gen uint64, _ []byte) error {
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
