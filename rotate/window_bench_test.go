package rotate

import (
	"testing"
	"time"

	"github.com/streamdedup/dedup/filter"
)

// BenchmarkOldestLive compares OldestLive through the schedule (one entry:
// a fixed window, and 8 entries) with the fixed window's formula it
// replaced, in one run.
func BenchmarkOldestLive(b *testing.B) {
	r, err := New(Options{Window: time.Minute, MaxWindow: 10 * time.Minute, Generations: 4, Kind: filter.Blocked, Capacity: 1, FalsePositiveRate: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	t := time.Unix(1_700_000_000, 0)
	window, span := int64(time.Minute), int64(15*time.Second)
	var sink uint64
	b.Run("formula", func(b *testing.B) {
		for i := range b.N {
			ns := t.UnixNano() + int64(i) - window
			sink += uint64(ns / span)
		}
	})
	b.Run("schedule-1", func(b *testing.B) {
		for i := range b.N {
			sink += r.OldestLive(t.Add(time.Duration(i)))
		}
	})
	for i := range 8 {
		_, _ = r.SetWindow(time.Minute+time.Duration(i%3)*time.Minute, t.Add(time.Duration(i)*20*time.Second))
	}
	b.Run("schedule-"+string(rune('0'+len(r.Schedule().Changes()))), func(b *testing.B) {
		for i := range b.N {
			sink += r.OldestLive(t.Add(time.Duration(i)))
		}
	})
	_ = sink
}
