package exact

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dchest/siphash"
	"github.com/streamdedup/dedup/internal/cputime"
	"github.com/streamdedup/dedup/internal/diskuse"
)

// benchKeys returns n random 16-byte keys.
func benchKeys(rng *rand.Rand, n int) [][]byte {
	buf := make([]byte, 16*n)
	for i := 0; i < len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], rng.Uint64())
	}
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = buf[16*i : 16*i+16]
	}
	return keys
}

// BenchmarkCommit measures committed keys/s: one iteration is one Commit of
// batch random 16-byte keys with a checkpoint, on a real directory.
func BenchmarkCommit(b *testing.B) {
	for _, m := range []struct {
		name string
		logs bool
	}{
		{"keys", false},
		{"logonly", true},
	} {
		for _, batch := range []int{1, 10_000, 100_000} {
			b.Run(fmt.Sprintf("%s/keys=%d", m.name, batch), func(b *testing.B) {
				s := mustOpen(b, b.TempDir(), Options{LogOnly: m.logs})
				defer mustClose(b, s)
				rng := rand.New(rand.NewPCG(1, 2))
				keys := benchKeys(rng, batch)
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					for _, k := range keys { // fresh keys every commit
						binary.LittleEndian.PutUint64(k, rng.Uint64())
					}
					bt := s.NewBatch()
					for _, k := range keys {
						bt.Add(1, k, binary.LittleEndian.Uint64(k))
					}
					bt.SetCheckpoint([]byte(fmt.Sprint(i)))
					if _, err := bt.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				el := time.Since(start)
				b.ReportMetric(float64(b.N*batch)/el.Seconds()/1e6, "Mkeys/s")
				b.ReportMetric(0, "ns/op")
				m := s.Metrics()
				b.ReportMetric(float64(m.ReadAmp()), "readamp")
			})
		}
	}
}

// BenchmarkPebbleRaw is the baseline: a plain Pebble batch of Sets with
// default options, synced.
func BenchmarkPebbleRaw(b *testing.B) {
	for _, batch := range []int{1, 10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", batch), func(b *testing.B) {
			db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: quietLogger{}})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			keys := benchKeys(rng, batch)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				pb := db.NewBatch()
				for _, k := range keys {
					binary.LittleEndian.PutUint64(k, rng.Uint64())
					pb.Set(k, nil, nil)
				}
				if err := pb.Commit(pebble.Sync); err != nil {
					b.Fatal(err)
				}
				pb.Close()
			}
			el := time.Since(start)
			b.ReportMetric(float64(b.N*batch)/el.Seconds()/1e6, "Mkeys/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkHas measures point lookups on a store of 1M keys after
// compactions settle: present keys and absent keys.
func BenchmarkHas(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			dir := b.TempDir()
			s := mustOpen(b, dir, Options{memLimit: m.memLimit})
			rng := rand.New(rand.NewPCG(3, 4))
			var present [][]byte
			for c := 0; c < 10; c++ {
				keys := benchKeys(rng, 100_000)
				bt := s.NewBatch()
				for _, k := range keys {
					bt.Add(1, k, 0)
				}
				if _, err := bt.Commit(); err != nil {
					b.Fatal(err)
				}
				present = append(present, keys[:1000]...)
			}
			mustClose(b, s) // reopen: lookups from sstables, not the memtable
			s = mustOpen(b, dir, Options{memLimit: m.memLimit})
			defer mustClose(b, s)
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
				if s.Metrics().Compact.NumInProgress == 0 {
					break // measure lookups, not lookups racing compactions
				}
				time.Sleep(50 * time.Millisecond)
			}
			absent := benchKeys(rng, 10_000)
			for _, c := range []struct {
				name string
				keys [][]byte
				want bool
			}{{"present", present, true}, {"absent", absent, false}} {
				b.Run(c.name, func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						ok, err := s.Has(1, c.keys[i%len(c.keys)])
						if err != nil || ok != c.want {
							b.Fatalf("Has = %v, %v", ok, err)
						}
					}
				})
			}
			b.ReportMetric(float64(s.Metrics().ReadAmp()), "readamp")
		})
	}
}

// BenchmarkSortKeys sorts the fingerprints of a flush, 1M of them, of
// random 16-byte keys and of the quoted UUID-like event ids of the dedup
// command's benchmark (which share their first 24 bytes within long runs:
// their fingerprints do not).
func BenchmarkSortKeys(b *testing.B) {
	const n = 1_000_000
	rng := rand.New(rand.NewPCG(3, 4))
	for _, kind := range []string{"random", "uuid-like"} {
		g := newMemGen(1, 0)
		for i := 0; i < n; i++ {
			var k []byte
			if kind == "random" {
				k = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, rng.Uint64()), rng.Uint64())
			} else {
				id := uint64(1_000_000 + i)
				k = fmt.Appendf(nil, `"%08x-7425-40de-944b-%012x"`, id>>16, id*2654435761%(1<<48))
			}
			h0, h1 := siphash.Hash128(1, 2, k)
			var fp Fingerprint
			binary.LittleEndian.PutUint64(fp[:], h0)
			binary.LittleEndian.PutUint64(fp[8:], h1)
			g.add(&fp)
		}
		b.Run(kind, func(b *testing.B) {
			var ents, tmp []sortEnt
			for b.Loop() {
				ents, tmp = g.sortedKeys(ents, tmp)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}

// BenchmarkSustained mimics the engine's use of the store over many
// generations: commits of 5000 random 16-byte keys with a checkpoint, a new
// generation every 200 commits (1M keys), the generations older than four
// dropped and reclaimed in the background, and one Has per 16 keys added
// (the engine asks the store only on a filter hit), half of them for
// stored keys. One iteration is one key; run it with -benchtime=Nx for N
// keys. cpu-ns/key counts the whole process (background flushes and
// compactions included), the fairer figure on a shared machine.
func BenchmarkSustained(b *testing.B) {
	const per, perGen, gens = 5000, 200, 4
	s := mustOpen(b, b.TempDir(), Options{MemTableSize: benchMemTable})
	defer mustClose(b, s)
	rng := rand.New(rand.NewPCG(5, 6))
	keys := benchKeys(rng, per)
	var reclaim sync.WaitGroup
	var present [][]byte
	b.ResetTimer()
	start, cpu0 := time.Now(), cputime.Process()
	for i := 0; i < b.N; i += per {
		c := i / per
		gen := uint64(1 + c/perGen)
		for _, k := range keys {
			binary.LittleEndian.PutUint64(k, rng.Uint64())
			binary.LittleEndian.PutUint64(k[8:], rng.Uint64())
		}
		for j := 0; j < per/16; j++ {
			var k []byte
			if j%2 == 0 && len(present) > 0 {
				k = present[rng.IntN(len(present))]
			} else {
				k = keys[j] // not yet added
			}
			if _, err := s.Has(gen, k); err != nil {
				b.Fatal(err)
			}
		}
		bt := s.NewBatch()
		for _, k := range keys {
			bt.Add(gen, k, binary.LittleEndian.Uint64(k))
		}
		if c%perGen == 0 && gen > gens {
			bt.DropGenerationsBefore(gen - gens)
			reclaim.Wait()
			reclaim.Add(1)
			go func() {
				defer reclaim.Done()
				if err := s.Reclaim(context.Background()); err != nil {
					b.Error(err)
				}
			}()
			present = present[:0]
		}
		bt.SetCheckpoint(binary.BigEndian.AppendUint64(nil, uint64(c)))
		if _, err := bt.Commit(); err != nil {
			b.Fatal(err)
		}
		if len(present) < 1<<16 {
			present = append(present, bytes.Clone(keys[per/2]))
		}
	}
	el, cpu := time.Since(start), cputime.Process()-cpu0
	b.StopTimer()
	reclaim.Wait()
	b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "Mkeys/s")
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/key")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(s.Metrics().ReadAmp()), "readamp")
}

var benchMemTable uint64 = 64 << 20

var diskKeys = flag.Int("exact.diskkeys", 10_000_000, "keys held by BenchmarkDiskPerKey")

// BenchmarkDiskPerKey fills a store on disk the way the engine does with
// -exact.diskkeys random 16-byte keys held at once: four generations of
// commits of 5000 keys, the generation before them dropped and reclaimed,
// a snapshot at the end of each generation truncating the log as the
// engine's snapshots do. In exact mode the engine truncates through the
// newest snapshot (sub-benchmark log=newest: the log holds the one
// generation since it, as just before a snapshot); in probabilistic mode,
// and in exact mode before, through the one before it (log=previous: two
// generations). Then it
// reports the disk per held key (all files; the key tables; the log
// tables), the compactions Pebble ran, and the time of one Has, as the
// engine asks it (of the generation its filter names): of a stored key of
// any live generation, and of an absent key. Run it once: -benchtime=1x.
func BenchmarkDiskPerKey(b *testing.B) {
	b.Run("log=newest", func(b *testing.B) { benchDiskPerKey(b, false) })
	b.Run("log=previous", func(b *testing.B) { benchDiskPerKey(b, true) })
}

// benchDiskPerKey is BenchmarkDiskPerKey, each snapshot truncating the log
// through the one before it (keepPrevious) or through itself.
func benchDiskPerKey(b *testing.B, keepPrevious bool) {
	const gens, per = 4, 5000
	perGen := *diskKeys / gens / per * per
	dir := b.TempDir()
	s := mustOpen(b, dir, Options{})
	defer mustClose(b, s)
	rng := rand.New(rand.NewPCG(7, 8))
	keys := benchKeys(rng, per)
	type lookup struct {
		gen uint64
		key []byte
	}
	var present []lookup
	var prevSnap uint64
	start := time.Now()
	for gen := uint64(1); gen <= gens+1; gen++ {
		for c := 0; c < perGen/per; c++ {
			for _, k := range keys {
				binary.LittleEndian.PutUint64(k, rng.Uint64())
				binary.LittleEndian.PutUint64(k[8:], rng.Uint64())
			}
			bt := s.NewBatch()
			for _, k := range keys {
				bt.Add(gen, k, rng.Uint64())
			}
			if c == 0 && gen > gens {
				bt.DropGenerationsBefore(gen - gens + 1)
			}
			bt.SetCheckpoint(binary.BigEndian.AppendUint64(nil, gen))
			seq, err := bt.Commit()
			if err != nil {
				b.Fatal(err)
			}
			if gen > 1 && c%4 == 0 && len(present) < 100_000 {
				for _, k := range keys[:per/100] {
					present = append(present, lookup{gen, bytes.Clone(k)})
				}
			}
			if c == perGen/per-1 && gen < gens+1 { // a snapshot
				through := seq
				if keepPrevious {
					through = prevSnap
				}
				if through > 0 {
					if err := s.TruncateLog(through); err != nil {
						b.Fatal(err)
					}
				}
				prevSnap = seq
			}
		}
	}
	if err := s.Reclaim(context.Background()); err != nil {
		b.Fatal(err)
	}
	fill := time.Since(start)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		// Pebble deletes the tables Reclaim excised in the background.
		m := s.Metrics()
		if m.Compact.NumInProgress == 0 && s.frozenCount() == 0 && m.Table.ObsoleteSize == 0 && m.Table.ZombieSize == 0 {
			break
		}
	}
	held := float64(gens * perGen)
	total, err := diskuse.Bytes(vfs.Default, dir)
	if err != nil {
		b.Fatal(err)
	}
	keyTables, err := s.db.EstimateDiskUsage(tagGen(tagFP, 0), fpEnd)
	if err != nil {
		b.Fatal(err)
	}
	filterTables, err := s.db.EstimateDiskUsage(tagGen(tagFPFilter, 0), fpFiltersEnd)
	if err != nil {
		b.Fatal(err)
	}
	logTables, err := s.db.EstimateDiskUsage(logKey(0), logEnd)
	if err != nil {
		b.Fatal(err)
	}
	m := s.Metrics()
	b.Logf("%.0f keys held, filled in %v; %d B on disk (%d key tables, %d filters, %d log tables, %d commit log); %d B of filters in memory",
		held, fill.Round(time.Millisecond), total, keyTables, filterTables, logTables, s.logBytes.Load(), s.filters.bytes())
	b.ReportMetric(float64(total)/held, "B/key")
	b.ReportMetric(float64(keyTables)/held, "keyB/key")
	b.ReportMetric(float64(logTables)/held, "logB/key")
	b.ReportMetric(float64(filterTables)/held, "filterB/key")
	b.ReportMetric(float64(m.Compact.Count), "compactions")
	b.ReportMetric(float64(m.ReadAmp()), "readamp")
	b.ReportMetric(held/fill.Seconds()/1e6, "fill-Mkeys/s")
	rng.Shuffle(len(present), func(i, j int) { present[i], present[j] = present[j], present[i] })
	var absent []lookup
	for _, k := range benchKeys(rng, len(present)) {
		absent = append(absent, lookup{2 + rng.Uint64N(gens), k})
	}
	for _, c := range []struct {
		name    string
		lookups []lookup
		want    bool
	}{{"warm-up", present[:10_000], true}, {"present", present, true}, {"absent", absent, false}} {
		t0 := time.Now()
		for i, l := range c.lookups {
			if ok, err := s.Has(l.gen, l.key); err != nil || ok != c.want {
				b.Fatalf("%s key %d of generation %d: %v, %v", c.name, i, l.gen, ok, err)
			}
		}
		if c.name != "warm-up" {
			b.ReportMetric(float64(time.Since(t0).Nanoseconds())/float64(len(c.lookups)), "has-"+c.name+"-ns")
		}
		m := s.Metrics()
		files := ""
		for l := range m.Levels {
			files += fmt.Sprintf(" L%d:%d", l, m.Levels[l].TablesCount)
		}
		b.Logf("after %s lookups: block cache %d hits %d misses; tables%s; L0 sublevels %d", c.name, m.BlockCache.Hits, m.BlockCache.Misses, files, m.Levels[0].Sublevels)
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkMemTable fills a memtable the way commits do, 5000 random
// 16-byte keys at a time up to 1.5M keys (a 64 MiB memtable), and looks
// keys up in it: ns per key added, per Has of a present key and of an
// absent one, and the memory the table takes per key.
func BenchmarkMemTable(b *testing.B) {
	const n, per = 1_500_000, 5000
	rng := rand.New(rand.NewPCG(9, 10))
	keys := benchKeys(rng, n)
	absent := benchKeys(rng, 100_000)
	ents := benchEnts(keys)
	absentFPs := benchEnts(absent)
	b.Run("add", func(b *testing.B) {
		var size int
		cpu0 := cputime.Process()
		for b.Loop() {
			m := &memTable{limit: 64 << 20}
			for lo := 0; lo < n; lo += per {
				m.addFPs(ents[lo : lo+per])
			}
			size = m.size
			m.free()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N*n), "cpu-ns/key")
		b.ReportMetric(float64(size)/n, "B/key")
	})
	m := &memTable{limit: 64 << 20}
	defer m.free()
	for lo := 0; lo < n; lo += per {
		m.addFPs(ents[lo : lo+per])
	}
	for _, c := range []struct {
		name string
		ents []ent
		want bool
	}{{"has-present", ents, true}, {"has-absent", absentFPs, false}} {
		b.Run(c.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				if m.has(1, &c.ents[i%len(c.ents)].fp) != c.want {
					b.Fatal("wrong answer")
				}
				i += 7919
			}
		})
	}
}

// benchEnts returns the entries of keys in generation 1, fingerprinted
// under a fixed secret.
func benchEnts(keys [][]byte) []ent {
	ents := make([]ent, len(keys))
	for i, k := range keys {
		h0, h1 := siphash.Hash128(1, 2, k)
		ents[i].gen = 1
		binary.LittleEndian.PutUint64(ents[i].fp[:], h0)
		binary.LittleEndian.PutUint64(ents[i].fp[8:], h1)
	}
	return ents
}

// BenchmarkFlushWrite writes a flush of 1.5M random 16-byte keys of one
// generation: sort, filter, sstable.
func BenchmarkFlushWrite(b *testing.B) {
	const n = 1_500_000
	rng := rand.New(rand.NewPCG(9, 10))
	keys := benchKeys(rng, n)
	m := &memTable{limit: 64 << 20}
	defer m.free()
	m.addFPs(benchEnts(keys))
	s := mustOpen(b, b.TempDir(), Options{})
	defer mustClose(b, s)
	var sc sortScratch
	path := s.fs.PathJoin(s.dir, "bench.sst")
	for b.Loop() {
		if _, err := s.writeGenTable(path, m.gens[0], 1, &sc); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
}

// BenchmarkMemTableSize measures what MemTableSize trades, for commits of
// 5000 random 16-byte keys (-benchtime=Nx for N keys per size): the
// commit rate and CPU per key, the flushes per million keys, the most
// memory the memtables held (active and frozen, sampled after each
// commit), and the time Open takes to replay a memtable filled to its
// limit.
func BenchmarkMemTableSize(b *testing.B) {
	for _, size := range []uint64{4 << 20, 16 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			const per = 5000
			dir := b.TempDir()
			s := mustOpen(b, dir, Options{MemTableSize: size})
			rng := rand.New(rand.NewPCG(9, 10))
			keys := benchKeys(rng, per)
			commit := func(gen uint64) {
				for _, k := range keys {
					binary.LittleEndian.PutUint64(k, rng.Uint64())
					binary.LittleEndian.PutUint64(k[8:], rng.Uint64())
				}
				bt := s.NewBatch()
				for _, k := range keys {
					bt.Add(gen, k, binary.LittleEndian.Uint64(k))
				}
				if _, err := bt.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			held := func() int {
				s.memMu.RLock()
				defer s.memMu.RUnlock()
				n := s.active.size
				for _, m := range s.frozen {
					n += m.size
				}
				return n
			}
			ingests0 := s.db.Metrics().Ingest.Count
			maxHeld := 0
			b.ResetTimer()
			start, cpu0 := time.Now(), cputime.Process()
			for i := 0; i < b.N; i += per {
				commit(uint64(1 + i/4_000_000))
				maxHeld = max(maxHeld, held())
			}
			el, cpu := time.Since(start), cputime.Process()-cpu0
			b.StopTimer()
			flushes := s.db.Metrics().Ingest.Count - ingests0
			// Fill a memtable to its limit, leave it to the commit log, and
			// time its replay.
			if err := s.flushAll(); err != nil {
				b.Fatal(err)
			}
			for grow := 0; s.active.size+2*grow < s.memLimit; {
				before := s.active.size
				commit(1 << 30)
				grow = max(grow, s.active.size-before)
			}
			replayed := s.active.lastSeq - s.active.firstSeq + 1
			mustClose(b, s)
			t0 := time.Now()
			s = mustOpen(b, dir, Options{MemTableSize: size})
			open := time.Since(t0)
			mustClose(b, s)
			b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "Mkeys/s")
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/key")
			b.ReportMetric(float64(flushes)/(float64(b.N)/1e6), "flushes/Mkey")
			b.ReportMetric(float64(maxHeld)/(1<<20), "MiB-held")
			b.ReportMetric(open.Seconds()*1e3, "replay-ms")
			b.ReportMetric(float64(replayed*per)/1e6, "replayed-Mkeys")
			b.ReportMetric(0, "ns/op")
		})
	}
}
