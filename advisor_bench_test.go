package dedup_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"

	"github.com/streamdedup/dedup/internal/cputime"
)

// advBenchStream is a stream on event time at rate keys per second: key i
// arrives at i/rate; 1 in 50 repeats an earlier key, half of those 10 s
// back and half 2 minutes back (caught by a 1-minute window, and let
// through into the horizon). run observes the keys of [from, from+n) in
// batches of up to 256 at one time each, committing after each.
type advBenchStream struct {
	rate float64
	buf  [][]byte
	back [2]uint64 // keys 10 s and 2 min back
}

func newAdvBenchStream(rate float64) *advBenchStream {
	s := &advBenchStream{rate: rate, back: [2]uint64{uint64(10 * rate), uint64(120 * rate)}}
	s.buf = make([][]byte, 256)
	for i := range s.buf {
		s.buf[i] = make([]byte, 16)
	}
	return s
}

// key writes key i of the stream into k: a duplicate every 50th.
func (s *advBenchStream) key(i uint64, k []byte) {
	id := i
	if i%50 == 7 {
		if b := s.back[(i/50)%2]; i >= b {
			id = i - b
		}
	}
	binary.LittleEndian.PutUint64(k, id)
	binary.LittleEndian.PutUint64(k[8:], id*0x9e3779b97f4a7c15)
}

func (s *advBenchStream) run(tb testing.TB, e *Engine, from, n uint64, out []Verdict) {
	t0 := time.Unix(1_700_000_000, 0)
	for i := from; i < from+n; {
		m := min(uint64(len(s.buf)), from+n-i)
		for j := range m {
			s.key(i+j, s.buf[j])
		}
		at := t0.Add(time.Duration(float64(i) / s.rate * 1e9))
		if err := e.ObserveBatchAt(s.buf[:m], at, out[:m]); err != nil {
			tb.Fatal(err)
		}
		if err := e.Commit(nil); err != nil {
			tb.Fatal(err)
		}
		i += m
	}
}

// BenchmarkObserveAdvisor measures the window advisor's CPU per observed
// key: probabilistic ObserveBatchAt and Commit on event time (window 1
// minute, 4 generations), one goroutine, with no horizon (HorizonSample
// -1), a fixed 1-in-16 sample (HorizonSample 16 under an unbounded budget)
// and the default adaptive sample (every key while the horizon fits 4
// MiB). At 2,000 keys/s of event time the horizon would hold 1.1 million
// keys (Window + span + 8 Windows) and the adaptive sample keeps 1 in 2;
// at 50,000 keys/s it settles at 1 in 32. Each
// engine first runs 5 minutes of the stream; the three then take turns in
// rounds of 64k keys so that each sees the same load. Reported: CPU ns
// per key of each (the process's) and the ratios to no horizon.
//
//	go test -run '^$' -bench BenchmarkObserveAdvisor -benchtime=1000000x .
func BenchmarkObserveAdvisor(b *testing.B) {
	for _, rate := range []float64{2000, 50000} {
		b.Run(fmt.Sprintf("rate=%.0f", rate), func(b *testing.B) {
			type variant struct {
				name string
				e    *Engine
				cpu  time.Duration
			}
			vs := []*variant{{name: "off"}, {name: "fixed16"}, {name: "adaptive"}}
			for _, v := range vs {
				o := Options{Window: time.Minute, Generations: 4, EventTime: true, Probabilistic: true, ExpectedRate: rate}
				switch v.name {
				case "off":
					o.HorizonSample = -1
				case "fixed16":
					o.HorizonSample, o.HorizonBytes = 16, 1<<40
				}
				v.e = openT(b, o)
			}
			s := newAdvBenchStream(rate)
			out := make([]Verdict, 256)
			warm := uint64(300 * rate)
			for _, v := range vs {
				s.run(b, v.e, 0, warm, out)
			}
			b.ResetTimer()
			const round = 64 << 10
			for done := 0; done < b.N; done += round {
				n := uint64(min(round, b.N-done))
				for _, v := range vs {
					c0 := cputime.Process()
					s.run(b, v.e, warm+uint64(done), n, out)
					v.cpu += cputime.Process() - c0
				}
			}
			b.StopTimer()
			for _, v := range vs {
				b.ReportMetric(float64(v.cpu.Nanoseconds())/float64(b.N), v.name+"-cpuns/key")
				if v.name != "off" {
					b.ReportMetric(v.cpu.Seconds()/vs[0].cpu.Seconds(), v.name+"-x-off")
					adv := v.e.Stats().WindowAdvice
					b.ReportMetric(float64(adv.Sample), v.name+"-sample")
					b.ReportMetric(float64(adv.Bytes)/(1<<20), v.name+"-advisorMiB")
				}
			}
		})
	}
}
