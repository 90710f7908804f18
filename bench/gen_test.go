package bench

import (
	"bytes"
	"math"
	"testing"
	"time"
)

// TestStreamStatistics checks the generator's duplicate share, delay mean
// and rate against their configuration, within stated tolerances.
func TestStreamStatistics(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  StreamOptions
		// mean is the expected delay mean.
		mean time.Duration
	}{
		{"exp", StreamOptions{Seed: 3, Rate: 1000, DuplicateFraction: 0.1, Delay: DelayOptions{Mean: 2 * time.Second}, Duration: 10 * time.Minute}, 2 * time.Second},
		{"bimodal", StreamOptions{Seed: 4, Rate: 1000, DuplicateFraction: 0.1, Delay: DelayOptions{Kind: DelayBimodal, RetryMean: time.Second, ReplayShare: 0.25, ReplayMin: time.Minute, ReplayMax: 3 * time.Minute}, Duration: 30 * time.Minute},
			time.Duration(0.75*float64(time.Second) + 0.25*float64(2*time.Minute))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewStream(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var ev Event
			var n, dups, replays int
			var delaySum float64
			var last time.Duration
			seen := map[string]bool{}
			for s.Next(&ev) {
				if ev.At < last {
					t.Fatalf("event %d at %v before %v", n, ev.At, last)
				}
				last = ev.At
				n++
				k := string(ev.Key)
				if ev.Dup != seen[k] {
					t.Fatalf("event %d: Dup=%v but key seen=%v", n, ev.Dup, seen[k])
				}
				seen[k] = true
				// Measure after the longest delay, so the flow is steady.
				if ev.Dup && ev.At > 5*time.Minute {
					dups++
					delaySum += float64(ev.Delay)
					if ev.Replay {
						replays++
					}
				}
			}
			steady := 0
			s2, _ := NewStream(tc.cfg)
			for s2.Next(&ev) {
				if ev.At > 5*time.Minute {
					steady++
				}
			}
			share := float64(dups) / float64(steady)
			// Binomial SE of the share is ~0.0004 here: 0.005 is > 10 SE.
			if math.Abs(share-tc.cfg.DuplicateFraction) > 0.005 {
				t.Errorf("duplicate share %.4f, want %.3f ± 0.005", share, tc.cfg.DuplicateFraction)
			}
			mean := time.Duration(delaySum / float64(dups))
			// The delay mean's SE is under 2% of the mean here: allow 6%.
			if d := math.Abs(float64(mean-tc.mean)) / float64(tc.mean); d > 0.06 {
				t.Errorf("delay mean %v, want %v ± 6%%", mean, tc.mean)
			}
			rate := float64(n) / tc.cfg.Duration.Seconds()
			if math.Abs(rate-tc.cfg.Rate)/tc.cfg.Rate > 0.03 {
				t.Errorf("rate %.0f/s, want %.0f ± 3%%", rate, tc.cfg.Rate)
			}
			if tc.cfg.Delay.Kind == DelayBimodal {
				if r := float64(replays) / float64(dups); math.Abs(r-0.25) > 0.03 {
					t.Errorf("replay share %.3f, want 0.25 ± 0.03", r)
				}
			}
		})
	}
}

func TestStreamDeterministic(t *testing.T) {
	cfg := StreamOptions{Seed: 9, Rate: 500, DuplicateFraction: 0.2, Events: 20000}
	a, _ := NewStream(cfg)
	b, _ := NewStream(cfg)
	var x, y Event
	for i := 0; a.Next(&x); i++ {
		if !b.Next(&y) || x.At != y.At || !bytes.Equal(x.Key, y.Key) || x.Dup != y.Dup {
			t.Fatalf("event %d differs: %+v vs %+v", i, x, y)
		}
	}
	if b.Next(&y) {
		t.Fatal("second stream is longer")
	}
}

func TestStreamKeyFormats(t *testing.T) {
	for _, kf := range []string{KeysUUID, KeysComposite} {
		s, err := NewStream(StreamOptions{Keys: kf, Events: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var ev Event
		for s.Next(&ev) {
			switch kf {
			case KeysUUID:
				if len(ev.Key) != 36 || ev.Key[8] != '-' || ev.Key[14] != '4' {
					t.Fatalf("not a v4 UUID: %q", ev.Key)
				}
			case KeysComposite:
				if ev.Key[0] != 'u' || bytes.Count(ev.Key, []byte("/")) != 2 {
					t.Fatalf("not user/session/seq: %q", ev.Key)
				}
			}
		}
	}
}

func TestStreamConfigErrors(t *testing.T) {
	for _, cfg := range []StreamOptions{
		{Events: 10, Keys: "ulid"},
		{Events: 10, DuplicateFraction: 0.99},
		{Events: 10, Delay: DelayOptions{Kind: "normal"}},
		{},
	} {
		if _, err := NewStream(cfg); err == nil {
			t.Errorf("NewStream(%+v): no error", cfg)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		want := q * 100000 * float64(time.Microsecond)
		got := float64(h.Quantile(q))
		if math.Abs(got-want)/want > 0.02 {
			t.Errorf("q%.3f = %v, want %v ± 2%%", q, time.Duration(got), time.Duration(want))
		}
	}
	if h.Max() != 100*time.Millisecond || h.Count() != 100000 {
		t.Errorf("max %v count %d", h.Max(), h.Count())
	}
	for v := int64(0); v < 1<<20; v += 997 {
		if b := bucketOf(v); bucketLow(b) > v || bucketLow(b+1) <= v {
			t.Fatalf("value %d in bucket %d [%d, %d)", v, b, bucketLow(b), bucketLow(b+1))
		}
	}
}
