package dedup_test

import (
	"context"
	"runtime/pprof"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/bench"
)

// BenchmarkObserveHeadline runs the stream of dedupbench compare's
// headline (400,000 events at 50,000/s of virtual time, 5% duplicates
// after a mean of 1 s, a 5 s window, FP 1%, batches of 512, a commit every
// 100 ms of the stream's clock) on one goroutine through the default
// probabilistic engine, the same engine with the window advisor's horizon
// off (HorizonSample -1) and with the whole advisor and the observed-FP
// shadow off (DisableAdvice), and the two bare filters of the
// headline (bits-and-blooms and parquet-go's split-block filter, two of
// them each, rotated every window). The variants take turns, a whole
// stream each, every engine opened afresh outside the timing; b.N counts
// streams. Reported: each variant's Mevents/s, the engine's ratio to each
// bare filter (wall clock, same run), and horizon-cost% and advice-cost%:
// the wall time the horizon, and the advisor with the shadow, add to the
// engine's.
//
//	go test -run '^$' -bench BenchmarkObserveHeadline -benchtime=20x .
func BenchmarkObserveHeadline(b *testing.B) {
	const (
		events = 400_000
		rate   = 50_000.0
		dups   = 0.05
		window = 5 * time.Second
		batch  = 512
		every  = 100 * time.Millisecond
	)
	st, err := bench.NewStream(bench.StreamOptions{Rate: rate, DuplicateFraction: dups,
		Delay: bench.DelayOptions{Mean: time.Second}, Events: events})
	if err != nil {
		b.Fatal(err)
	}
	var keys [][]byte
	var at []time.Duration
	var ev bench.Event
	for st.Next(&ev) {
		keys = append(keys, ev.Key)
		at = append(at, ev.At)
	}
	epoch := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	distinct := rate * (1 - dups)
	engine := func(advice bool, horizon int) func() time.Duration {
		return func() time.Duration {
			clk := bench.NewVirtualClock(epoch)
			e, err := Open(Options{Probabilistic: true, Window: window, ExpectedRate: distinct, FalsePositiveRate: 0.01, Now: clk.Now, HorizonSample: horizon})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			if !advice {
				DisableAdvice(e)
			}
			out := make([]Verdict, batch)
			next := every
			t0 := time.Now()
			for lo := 0; lo < len(keys); lo += batch {
				hi := min(lo+batch, len(keys))
				clk.Set(at[lo])
				if err := e.ObserveBatch(keys[lo:hi], out); err != nil {
					b.Fatal(err)
				}
				if at[hi-1] >= next {
					if err := e.Commit(nil); err != nil {
						b.Fatal(err)
					}
					next = at[hi-1] + every
				}
			}
			return time.Since(t0)
		}
	}
	bare := func(mk func() bench.Target) func() time.Duration {
		return func() time.Duration {
			t := mk()
			dup := make([]bool, batch)
			t0 := time.Now()
			for lo := 0; lo < len(keys); lo += batch {
				hi := min(lo+batch, len(keys))
				if err := t.Check(keys[lo:hi], epoch.Add(at[lo]), dup); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(t0)
		}
	}
	variants := []struct {
		name string
		run  func() time.Duration
		wall time.Duration
	}{
		{name: "engine", run: engine(true, 0)},
		{name: "engine-nohorizon", run: engine(true, -1)},
		{name: "engine-noadvice", run: engine(false, 0)},
		{name: "bitsandblooms", run: bare(func() bench.Target { return bench.NewBloomTarget(window, distinct, 0.01) })},
		{name: "sbbf", run: bare(func() bench.Target { return bench.NewSBBFTarget(window, distinct, 0.01) })},
	}
	b.ResetTimer()
	for range b.N {
		for i := range variants {
			// Labelled for a CPU profile: go tool pprof -tagfocus variant=engine.
			pprof.Do(context.Background(), pprof.Labels("variant", variants[i].name), func(context.Context) {
				variants[i].wall += variants[i].run()
			})
		}
	}
	b.StopTimer()
	byName := map[string]time.Duration{}
	for _, v := range variants {
		byName[v.name] = v.wall
		b.ReportMetric(float64(b.N*len(keys))/v.wall.Seconds()/1e6, v.name+"-Mevents/s")
	}
	b.ReportMetric(byName["bitsandblooms"].Seconds()/byName["engine"].Seconds(), "engine-x-bitsandblooms")
	b.ReportMetric(byName["sbbf"].Seconds()/byName["engine"].Seconds(), "engine-x-sbbf")
	b.ReportMetric(100*(byName["engine"].Seconds()/byName["engine-noadvice"].Seconds()-1), "advice-cost%")
	b.ReportMetric(100*(byName["engine"].Seconds()/byName["engine-nohorizon"].Seconds()-1), "horizon-cost%")
}
