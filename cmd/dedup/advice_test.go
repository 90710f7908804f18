package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
)

// TestPrintAdvice: duplicates caught before an estimate say so, without
// a leak figure of 0 that reads as measured, and delays under a second
// print as what they are, not "0s" or "not known".
func TestPrintAdvice(t *testing.T) {
	for _, tc := range []struct {
		a          dedup.WindowAdvice
		want, nope []string
	}{
		{dedup.WindowAdvice{}, []string{"no duplicate measured yet"}, []string{"leaks"}},
		{dedup.WindowAdvice{Caught: 500, Horizon: 15 * time.Minute},
			[]string{"500 duplicates caught, 0 past the window; no estimate yet"}, []string{"per million", "not known"}},
		{dedup.WindowAdvice{Caught: 500, Model: "exponential, mean 0.4s", DelayP50: 280 * time.Millisecond,
			DelayP90: 920 * time.Millisecond, DelayP99: 1840 * time.Millisecond, WindowFor100: 9 * time.Second, WindowFor10: 12 * time.Second, WindowFor1: 15 * time.Second, LeaksPerMillion: 3},
			[]string{"p50 280ms, p90 920ms, p99 1.84s", "100/M 9s", "dup model       exponential, mean 0.4s"}, []string{"not known"}},
	} {
		var b bytes.Buffer
		printAdvice(&b, tc.a, 15)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%+v: %q lacks %q", tc.a, b.String(), w)
			}
		}
		for _, n := range tc.nope {
			if strings.Contains(b.String(), n) {
				t.Errorf("%+v: %q has %q", tc.a, b.String(), n)
			}
		}
	}
}
