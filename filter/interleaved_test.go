package filter

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func mustInterleaved(t testing.TB, cfg InterleavedConfig) *Interleaved {
	t.Helper()
	tb, err := NewInterleaved(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestInterleavedNoFalseNegatives adds keys to every lane and checks that
// each tests present in its own lane, in one-at-a-time and batch form,
// after a marshal round trip, and after other lanes are cleared.
func TestInterleavedNoFalseNegatives(t *testing.T) {
	for _, lanes := range []int{1, 3, 5, 8, 9, 16} {
		for _, lines := range []int{1, 2} {
			t.Run(fmt.Sprintf("lanes=%d/lines=%d", lanes, lines), func(t *testing.T) {
				tb := mustInterleaved(t, InterleavedConfig{Lanes: lanes, Capacity: 5000, FalsePositiveRate: 0.01, Lines: lines})
				next := hashes(uint64(lanes*10+lines), shardHigh16)
				keys := make([][]uint64, lanes)
				for l := range lanes {
					// Past capacity too: a full lane keeps its keys.
					for range 6000 {
						keys[l] = append(keys[l], next())
					}
					if l%2 == 0 {
						tb.AddBatch(keys[l], l)
					} else {
						for _, h := range keys[l] {
							tb.TestOrAdd(h, l)
						}
					}
				}
				check := func(tb *Interleaved, skip func(l int) bool) {
					t.Helper()
					out := make([]LaneSet, 6000)
					for l := range lanes {
						if skip(l) {
							continue
						}
						tb.TestBatch(keys[l], out)
						for i, h := range keys[l] {
							if !tb.Test(h).Has(l) || !out[i].Has(l) {
								t.Fatalf("lane %d lost key %d (%#x)", l, i, h)
							}
						}
					}
				}
				check(tb, func(int) bool { return false })
				enc, err := tb.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				back, err := UnmarshalInterleaved(enc)
				if err != nil {
					t.Fatal(err)
				}
				check(back, func(int) bool { return false })
				for l := range lanes {
					if back.Count(l) != tb.Count(l) {
						t.Fatalf("lane %d count %d after round trip, want %d", l, back.Count(l), tb.Count(l))
					}
				}
				// Clear the even lanes: the odd ones keep every key, and the
				// cleared ones are empty.
				for l := 0; l < lanes; l += 2 {
					back.ClearLane(l)
					if back.Count(l) != 0 {
						t.Fatalf("lane %d count %d after clear", l, back.Count(l))
					}
				}
				check(back, func(l int) bool { return l%2 == 0 })
				for l := 0; l < lanes; l += 2 {
					for _, h := range keys[l] {
						if s := back.Test(h); s.Has(l) && lanes > 1 {
							// A cleared lane has no bit set at all.
							t.Fatalf("cleared lane %d still matches %#x (%b)", l, h, s)
						}
					}
				}
			})
		}
	}
}

// TestInterleavedFPOnTarget fills every lane to capacity and measures the
// rate at which absent keys match any lane. It must sit within 10% of the
// target: at most the target (plus sampling noise) and at least 0.9 of it,
// so that memory is not spent on an error rate nobody asked for. The
// bound allows 5 binomial standard deviations of sampling noise (with 4M
// probes: 0.25% of the rate at 1%, 0.8% at 0.1%), so a correct table fails
// with odds below one in a million; the table's own estimate must agree
// with the measurement to the same noise plus 3%.
func TestInterleavedFPOnTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 8 lanes of 400k keys")
	}
	const probes = 4_000_000
	for _, c := range []struct {
		lanes, lines int
		fp           float64
	}{
		{5, 1, 0.01}, {5, 2, 0.01}, {5, 1, 0.001}, {8, 1, 0.01}, {3, 2, 0.01},
	} {
		t.Run(fmt.Sprintf("lanes=%d/lines=%d/fp=%g", c.lanes, c.lines, c.fp), func(t *testing.T) {
			tb := mustInterleaved(t, InterleavedConfig{Lanes: c.lanes, Capacity: 400_000, FalsePositiveRate: c.fp, Lines: c.lines})
			next := hashes(7, shardHigh16)
			hs := make([]uint64, tb.Capacity())
			for l := range c.lanes {
				for i := range hs {
					hs[i] = next()
				}
				tb.AddBatch(hs, l)
			}
			hits := 0
			probe := hashes(8, shardHigh16)
			for range probes {
				if tb.Test(probe()) != 0 {
					hits++
				}
			}
			got := float64(hits) / probes
			sigma := math.Sqrt(c.fp * (1 - c.fp) / probes)
			est := tb.FPRate()
			bpk := float64(tb.SizeBytes()) / float64(tb.Capacity()) / float64(max(1, c.lanes-1))
			t.Logf("measured %.5f, estimated %.5f, target %g, k=%d, %.2f bytes per key of %d generations (%d lanes)",
				got, est, c.fp, tb.K(), bpk, max(1, c.lanes-1), c.lanes)
			if got > c.fp+5*sigma || got < 0.9*c.fp-5*sigma {
				t.Errorf("measured FP %.5f outside [0.9, 1] x target %g (+-5 sigma = %.5f)", got, c.fp, 5*sigma)
			}
			if math.Abs(got-est) > 5*sigma+0.03*est {
				t.Errorf("measured FP %.5f, estimate %.5f: the model is off", got, est)
			}
		})
	}
}

func TestInterleavedConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  InterleavedConfig
		want string
	}{
		{InterleavedConfig{Lanes: 0, Capacity: 1, FalsePositiveRate: 0.01}, "Lanes"},
		{InterleavedConfig{Lanes: 17, Capacity: 1, FalsePositiveRate: 0.01}, "Lanes"},
		{InterleavedConfig{Lanes: 5, Capacity: 0, FalsePositiveRate: 0.01}, "Capacity"},
		{InterleavedConfig{Lanes: 5, Capacity: 1, FalsePositiveRate: 0}, "FalsePositiveRate"},
		{InterleavedConfig{Lanes: 5, Capacity: 1, FalsePositiveRate: 1}, "FalsePositiveRate"},
		{InterleavedConfig{Lanes: 5, Capacity: 1, FalsePositiveRate: 0.01, Lines: 3}, "Lines"},
		{InterleavedConfig{Lanes: 5, Capacity: 1 << 48, FalsePositiveRate: 1e-9}, "limit"},
	} {
		if _, err := NewInterleaved(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %s", c.cfg, err, c.want)
		}
	}
}

// TestInterleavedCorrupt alters and truncates an encoding: every result is
// an ErrCorrupt, never a panic or a table.
func TestInterleavedCorrupt(t *testing.T) {
	tb := mustInterleaved(t, InterleavedConfig{Lanes: 5, Capacity: 300, FalsePositiveRate: 0.01})
	next := hashes(1, allShards)
	for l := range 5 {
		for range 200 {
			tb.Add(next(), l)
		}
	}
	enc, err := tb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for i := range enc {
		b := append([]byte(nil), enc...)
		b[i] ^= 0x20
		if _, err := UnmarshalInterleaved(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d altered: error %v, want ErrCorrupt", i, err)
		}
	}
	for n := range len(enc) {
		if _, err := UnmarshalInterleaved(enc[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: error %v, want ErrCorrupt", n, err)
		}
	}
}

// TestInterleavedSizes pins the bytes per key of the layouts the README
// quotes, from the sizing model (the FP test checks the model).
func TestInterleavedSizes(t *testing.T) {
	for _, c := range []struct {
		lanes, lines int
		fp           float64
	}{
		{5, 1, 0.01}, {5, 2, 0.01}, {9, 1, 0.01}, {9, 2, 0.01}, {5, 1, 0.001}, {5, 2, 0.001},
	} {
		tb := mustInterleaved(t, InterleavedConfig{Lanes: c.lanes, Capacity: 1 << 20, FalsePositiveRate: c.fp, Lines: c.lines})
		perLane := float64(tb.SizeBytes()) / float64(tb.Capacity())
		t.Logf("lanes=%d lines=%d fp=%g: k=%d, %.1f bits per key of one lane, %.2f bytes per key of %d generations",
			c.lanes, c.lines, c.fp, tb.K(), 8*perLane/float64(c.lanes), perLane/float64(c.lanes-1), c.lanes-1)
	}
}
