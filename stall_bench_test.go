package dedup_test

import (
	"encoding/binary"
	"flag"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/testclock"
)

var stallKeys = flag.Int("stall.keys", 2_000_000, "keys remembered by the state BenchmarkSnapshotStall snapshots")

// BenchmarkSnapshotStall measures how long a Snapshot stalls Observe: an
// observer times every ObserveBatch of 256 keys while snapshots of a state
// holding -stall.keys keys are written back to back; it reports the
// observer's p99 and worst batch latency during snapshots, against the same
// without, and the snapshot time. The filters are copied under each shard's
// lock only for the generation still changing, so the stall is that copy.
func BenchmarkSnapshotStall(b *testing.B) {
	clk := testclock.New(t0)
	o := Options{Dir: b.TempDir(), Probabilistic: true, Window: time.Hour,
		ExpectedRate: float64(*stallKeys) / 3600, Now: clk.Now, MaxInFlight: 1 << 22}
	e, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const batch = 256
	keys := make([][]byte, batch)
	for i := range keys {
		keys[i] = make([]byte, 16)
	}
	out := make([]Verdict, batch)
	step := time.Hour / time.Duration(*stallKeys)
	n := 0
	observe := func() time.Duration {
		clk.Advance(batch * step)
		for i := range keys {
			binary.LittleEndian.PutUint64(keys[i], uint64(n+i))
		}
		n += batch
		t := time.Now()
		if err := e.ObserveBatch(keys, out); err != nil {
			b.Fatal(err)
		}
		return time.Since(t)
	}
	for n < *stallKeys {
		observe()
		if n%(64*batch) == 0 {
			if err := e.Commit(nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := e.Commit(nil); err != nil {
		b.Fatal(err)
	}
	measure := func(during bool) (p99, worst time.Duration, snap time.Duration) {
		var lat []time.Duration
		var stop atomic.Bool
		done := make(chan time.Duration)
		if during {
			go func() {
				var total time.Duration
				for i := 0; i < 3; i++ {
					t := time.Now()
					if err := e.Snapshot(); err != nil {
						b.Error(err)
					}
					total += time.Since(t)
				}
				stop.Store(true)
				done <- total / 3
			}()
		} else {
			go func() { time.Sleep(time.Second); stop.Store(true); done <- 0 }()
		}
		for !stop.Load() {
			lat = append(lat, observe())
		}
		snap = <-done
		slices.Sort(lat)
		return lat[len(lat)*99/100], lat[len(lat)-1], snap
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p99a, worsta, _ := measure(false)
		p99b, worstb, snap := measure(true)
		b.ReportMetric(float64(p99a.Microseconds()), "p99-us")
		b.ReportMetric(float64(worsta.Microseconds()), "worst-us")
		b.ReportMetric(float64(p99b.Microseconds()), "p99-snap-us")
		b.ReportMetric(float64(worstb.Microseconds()), "worst-snap-us")
		b.ReportMetric(snap.Seconds()*1000, "snapshot-ms")
	}
}
