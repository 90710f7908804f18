package main

import (
	"fmt"
	"strconv"
	"time"
)

// printStats prints the end-of-run summary on stderr, of a run that
// started at start.
func (f *filterRun) printStats(start time.Time) {
	st := f.eng.Stats()
	el := time.Since(start)
	sf := f.filter.Load()
	cn := sf.Counts()
	ev := cn.Events
	pct := func(n int64) string {
		if ev == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.1f%%)", 100*float64(n)/float64(ev))
	}
	by := cn.Bytes
	w := f.env.stderr
	if at := sf.ResumedAt(); at != "" {
		fmt.Fprintf(w, "resumed at      %s\n", at)
	}
	fmt.Fprintf(w, "events          %d\n", ev)
	fmt.Fprintf(w, "distinct        %d%s\n", cn.Distinct, pct(cn.Distinct))
	fmt.Fprintf(w, "duplicates      %d%s\n", cn.Duplicates, pct(cn.Duplicates))
	fmt.Fprintf(w, "rejects         %d%s\n", cn.Rejects, pct(cn.Rejects))
	fmt.Fprintf(w, "store lookups   %d\n", st.StoreLookups)
	fmt.Fprintf(w, "false positives %d\n", st.FalsePositives)
	fmt.Fprintf(w, "observed FP     %s\n", observedFP(st.ObservedFPSamples, st.ObservedFPRate))
	if st.Seals+st.SealErrors > 0 {
		fmt.Fprintf(w, "fuse seals      %s\n", sealsLine(st.Seals, st.SealErrors))
	}
	printAdvice(w, st.WindowAdvice, 15)
	fmt.Fprintf(w, "commits         %d (mean %v)\n", st.Commits, st.CommitLatencyMean.Round(time.Microsecond))
	fmt.Fprintf(w, "elapsed         %v\n", el.Round(time.Millisecond))
	fmt.Fprintf(w, "throughput      %.1f MB/s, %s events/s\n", float64(by)/1e6/el.Seconds(), strconv.FormatFloat(float64(ev)/el.Seconds(), 'f', 0, 64))
}
