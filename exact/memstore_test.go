package exact

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestInMemoryAgreesWithAMap commits random keys, drops, records and
// checkpoints to an in-memory store and checks every read against a plain
// model.
func TestInMemoryAgreesWithAMap(t *testing.T) {
	s := mustOpen(t, "", Options{InMemory: true})
	rng := rand.New(rand.NewPCG(9, 10))
	type gk struct {
		gen uint64
		key int
	}
	keys := map[gk]bool{}
	recs := map[gk]string{}
	var floor uint64
	const nkeys = 3000
	for i := range 300 {
		b := s.NewBatch()
		gen := uint64(2 + i/40)
		for range rng.IntN(60) {
			k := gk{gen - uint64(rng.IntN(2)), rng.IntN(nkeys)}
			b.Add(k.gen, keyOf(k.key), 0)
			if k.gen >= floor {
				keys[k] = true
			}
		}
		if rng.IntN(4) == 0 {
			k := gk{gen - uint64(rng.IntN(3)), rng.IntN(50)}
			if rng.IntN(3) == 0 {
				b.DeleteRecord(k.gen, s.Fingerprint(keyOf(k.key)))
				delete(recs, k)
			} else {
				v := fmt.Sprint("r", i)
				b.PutRecord(k.gen, s.Fingerprint(keyOf(k.key)), []byte(v))
				if k.gen >= floor {
					recs[k] = v
				}
			}
		}
		if i%40 == 39 {
			floor = gen - 1
			b.DropGenerationsBefore(floor)
			for k := range keys {
				if k.gen < floor {
					delete(keys, k)
				}
			}
		}
		b.SetCheckpoint([]byte(fmt.Sprint("cp", i)))
		seq, err := b.Commit()
		if err != nil {
			t.Fatal(err)
		}
		if seq != uint64(i+1) || s.CommitSeq() != seq {
			t.Fatalf("commit %d: seq %d, CommitSeq %d", i, seq, s.CommitSeq())
		}
		if cp, _ := s.Checkpoint(); string(cp) != fmt.Sprint("cp", i) {
			t.Fatalf("checkpoint %q after commit %d", cp, i)
		}
		if i%25 != 0 {
			continue
		}
		for g := uint64(0); g <= gen; g++ {
			for k := range nkeys {
				ok, err := s.Has(g, keyOf(k))
				if err != nil {
					t.Fatal(err)
				}
				if want := keys[gk{g, k}]; ok != want {
					t.Fatalf("commit %d: Has(%d, %d) = %v, want %v", i, g, k, ok, want)
				}
			}
		}
		for k := range 50 {
			var want string
			var wg uint64
			for g := uint64(0); g <= gen; g++ {
				if v, ok := recs[gk{g, k}]; ok && g >= floor {
					want, wg = v, g
				}
			}
			g, v, ok, err := s.GetRecord(s.Fingerprint(keyOf(k)))
			if err != nil || ok != (want != "") || string(v) != want || ok && g != wg {
				t.Fatalf("commit %d: GetRecord(%d) = %d %q %v %v, want %d %q", i, k, g, v, ok, err, wg, want)
			}
		}
	}
	if s.DroppedBefore() != floor {
		t.Fatalf("DroppedBefore %d, want %d", s.DroppedBefore(), floor)
	}
	must(t, s.SetMeta("m", []byte("v")))
	if v, ok, err := s.GetMeta("m"); err != nil || !ok || string(v) != "v" {
		t.Fatalf("GetMeta = %q %v %v", v, ok, err)
	}
	if err := s.ScanFingerprints(0, func(uint64, Fingerprint) error { return nil }); !errors.Is(err, ErrInMemory) {
		t.Fatalf("ScanFingerprints = %v, want ErrInMemory", err)
	}
	if err := s.Backup("x"); !errors.Is(err, ErrInMemory) {
		t.Fatalf("Backup = %v, want ErrInMemory", err)
	}
	mustClose(t, s)
	if _, err := s.Has(1, keyOf(1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Has after Close = %v, want ErrClosed", err)
	}
}

// TestFPTable fills a table past several doublings: every fingerprint
// inserted is found once, the all-zero one too, and no other.
func TestFPTable(t *testing.T) {
	var tb fpTable
	defer tb.free()
	rng := rand.New(rand.NewPCG(1, 1))
	var in []Fingerprint
	in = append(in, Fingerprint{}, Fingerprint{8: 1})
	for range 20000 {
		var fp Fingerprint
		for i := range fp {
			fp[i] = byte(rng.Uint32())
		}
		fp[7] |= 0xf0 // homes at the segments' ends: long probe runs that wrap
		in = append(in, fp)
	}
	for i, fp := range in {
		if i == 1 {
			// {0...,1} stands for the all-zero fingerprint: the one
			// collision of the encoding.
			if tb.insert(fp) {
				t.Fatal("the all-zero fingerprint and {0, 1} are told apart")
			}
			continue
		}
		if !tb.insert(fp) {
			t.Fatalf("fingerprint %d reported present before its insert", i)
		}
	}
	for i, fp := range in {
		if !tb.has(fp) || tb.insert(fp) {
			t.Fatalf("fingerprint %d lost", i)
		}
	}
	if tb.n != len(in)-1 {
		t.Fatalf("%d fingerprints held, want %d", tb.n, len(in)-1)
	}
	var absent Fingerprint
	absent[3] = 0xaa
	if tb.has(absent) {
		t.Fatal("an absent fingerprint is found")
	}
	// Segments grow by half at 4/5 full: 20 to 30 bytes a key once each
	// has grown a few times (their first slots are a floor).
	if per := float64(tb.bytes()) / float64(tb.n); per < 20 || per > 30 {
		t.Fatalf("%.1f bytes a fingerprint, want 20 to 30", per)
	}
}

// TestInMemoryConcurrent runs commits and lookups at once (for -race).
func TestInMemoryConcurrent(t *testing.T) {
	s := mustOpen(t, "", Options{InMemory: true})
	defer mustClose(t, s)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				b := s.NewBatch()
				k := keyOf(w*1000 + i)
				b.Add(1, k, 0)
				b.PutRecord(1, s.Fingerprint(k), k)
				if _, err := b.Commit(); err != nil {
					t.Error(err)
					return
				}
				if ok, err := s.Has(1, k); err != nil || !ok {
					t.Errorf("key %q committed, Has = %v, %v", k, ok, err)
					return
				}
				if _, v, ok, err := s.GetRecord(s.Fingerprint(k)); err != nil || !ok || string(v) != string(k) {
					t.Errorf("record %q committed, GetRecord = %q, %v, %v", k, v, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
