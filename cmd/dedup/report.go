package main

import (
	"fmt"
	"strconv"
	"time"
)

// printStats prints the end-of-run summary on stderr.
func (f *filterRun) printStats() {
	st := f.eng.Stats()
	el := time.Since(f.start)
	ev := f.pub.events.Load()
	pct := func(n int64) string {
		if ev == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.1f%%)", 100*float64(n)/float64(ev))
	}
	by := f.pub.bytes.Load()
	w := f.env.stderr
	if f.resumed {
		fmt.Fprintf(w, "resumed at      %s\n", f.resumedAt)
	}
	fmt.Fprintf(w, "events          %d\n", ev)
	fmt.Fprintf(w, "distinct        %d%s\n", f.pub.distinct.Load(), pct(f.pub.distinct.Load()))
	fmt.Fprintf(w, "duplicates      %d%s\n", f.pub.dups.Load(), pct(f.pub.dups.Load()))
	fmt.Fprintf(w, "rejects         %d%s\n", f.pub.rejects.Load(), pct(f.pub.rejects.Load()))
	fmt.Fprintf(w, "store lookups   %d\n", st.StoreLookups)
	fmt.Fprintf(w, "false positives %d\n", st.FalsePositives)
	fmt.Fprintf(w, "commits         %d (mean %v)\n", st.Commits, st.CommitLatencyMean.Round(time.Microsecond))
	fmt.Fprintf(w, "elapsed         %v\n", el.Round(time.Millisecond))
	fmt.Fprintf(w, "throughput      %.1f MB/s, %s events/s\n", float64(by)/1e6/el.Seconds(), strconv.FormatFloat(float64(ev)/el.Seconds(), 'f', 0, 64))
}
