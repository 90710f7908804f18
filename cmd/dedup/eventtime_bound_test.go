package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFilterTimeFieldBound: `dedup filter --time-field ts --window W
// --state DIR` over a stream of event time, 2% of the events redelivered
// after a delay of up to 6 W, read in a fraction of the wall time the
// commits of its state take: no redelivery delayed Window +
// Window/Generations or more is dropped, none delayed under Window is
// written. At 100 events a second for 2 hours with a 5-minute window (the
// redeliveries up to 30 minutes late), 10 a second for 2 hours, and 10,000
// a second for 40 s with a 2-second window.
func TestFilterTimeFieldBound(t *testing.T) {
	for _, c := range []struct {
		rate   int
		dur    time.Duration
		window time.Duration
	}{
		{100, 2 * time.Hour, 5 * time.Minute},
		{10, 2 * time.Hour, 5 * time.Minute},
		{10000, 40 * time.Second, 2 * time.Second},
	} {
		t.Run(fmt.Sprintf("rate=%d", c.rate), func(t *testing.T) { filterTimeFieldBound(t, c.rate, c.dur, c.window) })
	}
}

func filterTimeFieldBound(t *testing.T, rate int, dur, window time.Duration) {
	grace := window + window/4
	base := time.Date(2020, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	rng := rand.New(rand.NewPCG(40, 1))
	type ev struct {
		at    int64 // ms
		key   int
		delay int64 // ms after the original; 0 for an original
	}
	evs := make([]ev, 0, 740_000)
	for i := range int(dur.Seconds()) * rate {
		at := base + int64(i)*1000/int64(rate)
		evs = append(evs, ev{at: at, key: i})
		if rng.IntN(50) == 0 {
			d := 1 + rng.Int64N(int64(6*window/time.Millisecond))
			evs = append(evs, ev{at: at + d, key: i, delay: d})
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return int(a.at - b.at) })
	lines := make([]string, len(evs))
	var in strings.Builder
	in.Grow(len(evs) * 36)
	for i, x := range evs {
		lines[i] = `{"id":"k` + strconv.Itoa(x.key) + `","ts":` + strconv.FormatInt(x.at, 10) + "}\n"
		in.WriteString(lines[i])
	}
	code, out, stderr := runCmd(t, in.String(), "filter", "--key", "id", "--time-field", "ts", "--window", window.String(), "--state", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := strings.SplitAfter(out, "\n")
	p := 0
	var dropped, written, dups int
	for i, x := range evs {
		passed := p < len(got) && got[p] == lines[i]
		if passed {
			p++
		}
		d := time.Duration(x.delay) * time.Millisecond
		switch {
		case x.delay == 0 && !passed:
			t.Fatalf("original k%d dropped", x.key)
		case x.delay == 0:
		case d < window && passed:
			t.Errorf("k%d delayed %v written: under the window", x.key, d)
		case d >= grace && !passed:
			t.Errorf("k%d delayed %v dropped: past Window + Window/Generations %v", x.key, d, grace)
		case d >= grace:
			written++
		case d < window:
			dropped++
		}
		if x.delay > 0 {
			dups++
		}
	}
	if p != len(got)-1 { // the last element is the empty string after the last newline
		t.Fatalf("%d lines written, %d matched the input", len(got)-1, p)
	}
	if dropped < 100 || written < 500 {
		t.Fatalf("of %d redeliveries, %d dropped and %d written: the stream does not exercise the bound", dups, dropped, written)
	}
}
