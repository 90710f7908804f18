package dedup_test

import (
	"encoding/binary"
	"flag"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/testclock"
)

var reopenKeys = flag.Int("reopen.keys", 1_000_000, "keys remembered by the state BenchmarkReopen reopens")

// BenchmarkReopen measures what a restart costs: Open of a state holding
// -reopen.keys remembered keys, restoring from a snapshot, and (exact mode)
// rebuilding the filters from the store instead; plus the snapshot write
// itself and its size. One iteration is one Open and Close.
func BenchmarkReopen(b *testing.B) {
	for _, mode := range []string{"probabilistic", "exact"} {
		prob := mode == "probabilistic"
		dir := b.TempDir()
		// The keys arrive evenly over one window of a virtual clock, at the
		// rate the filters are sized for.
		clk := testclock.New(t0)
		o := Options{Dir: dir, Probabilistic: prob, Window: time.Hour, ExpectedRate: float64(*reopenKeys) / 3600,
			MaxInFlight: 1 << 22, Now: clk.Now}
		step := time.Hour / time.Duration(*reopenKeys)
		b.Run(mode+"/fill", func(b *testing.B) {
			e, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			const batch = 4096
			keys := make([][]byte, batch)
			for i := range keys {
				keys[i] = make([]byte, 16)
			}
			out := make([]Verdict, batch)
			start := time.Now()
			for n := 0; n < *reopenKeys; n += batch {
				clk.Advance(batch * step)
				for i := range keys {
					binary.LittleEndian.PutUint64(keys[i], uint64(n+i))
					binary.LittleEndian.PutUint64(keys[i][8:], 0x5eed)
				}
				if err := e.ObserveBatch(keys, out); err != nil {
					b.Fatal(err)
				}
				if n%(256*batch) == 0 {
					if err := e.Commit(nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := e.Commit(nil); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(*reopenKeys)/time.Since(start).Seconds()/1e6, "Mkeys/s")
			t := time.Now()
			if err := e.Snapshot(); err != nil {
				b.Fatal(err)
			}
			snapWrite := time.Since(t)
			st := e.Stats()
			b.ReportMetric(snapWrite.Seconds(), "snapshot-s")
			b.ReportMetric(float64(st.SnapshotBytes)/float64(*reopenKeys), "snapshotB/key")
			b.ReportMetric(float64(st.DiskBytes)/float64(*reopenKeys), "diskB/key")
			if err := e.Close(); err != nil {
				b.Fatal(err)
			}
		})
		reopen := func(b *testing.B, o Options, want string) {
			for i := 0; i < b.N; i++ {
				t := time.Now()
				e, err := Open(o)
				if err != nil {
					b.Fatal(err)
				}
				d := time.Since(t)
				st := e.Stats()
				if st.RestoredFrom != want || st.RestoredKeys < uint64(*reopenKeys)*99/100 {
					b.Fatalf("restored %d keys from %q, want %d from %q", st.RestoredKeys, st.RestoredFrom, *reopenKeys, want)
				}
				b.ReportMetric(d.Seconds(), "open-s")
				if err := e.Close(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run(mode+"/from-snapshot", func(b *testing.B) { reopen(b, o, RestoredSnapshot) })
		if !prob {
			ro := o
			ro.IgnoreSnapshots = true
			b.Run(mode+"/rebuild-from-store", func(b *testing.B) { reopen(b, ro, RestoredStore) })
		}
	}
}
