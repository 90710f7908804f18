package dedup

import (
	"testing"
	"time"
)

// TestMemTableSize: the exact store's memtable and block cache follow the
// workload the options describe, the smaller of a full window's keys at
// 128 bytes each and a minute of ExpectedRate at 40 bytes each, as a power
// of two within [4 MiB, 64 MiB].
func TestMemTableSize(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want uint64
	}{
		{Options{}, 32 << 20}, // 10000 keys/s: 24 MB a minute (1.4 GB a window)
		{Options{ExpectedRate: 10, Window: time.Minute}, 4 << 20},                   // 96 kB a window
		{Options{ExpectedRate: 100, Window: time.Minute}, 4 << 20},                  // 240 kB a minute
		{Options{ExpectedRate: 1000, Window: 10 * time.Minute}, 4 << 20},            // 2.4 MB a minute
		{Options{ExpectedRate: 2778, Window: time.Hour}, 8 << 20},                   // 6.7 MB a minute
		{Options{ExpectedRate: 4444, Window: time.Hour}, 16 << 20},                  // 10.7 MB a minute
		{Options{ExpectedRate: 10000, Window: 5 * time.Second}, 8 << 20},            // 8 MB a window
		{Options{ExpectedRate: 1_000_000, Window: 10 * time.Second}, 64 << 20},      // 2.4 GB a minute
		{Options{ExpectedRate: 1_000_000, Window: time.Hour, Shards: 64}, 64 << 20}, // capped
	} {
		o := tc.o
		o.WithDefaults()
		if got := memTableSize(o); got != tc.want {
			t.Errorf("ExpectedRate %v, Window %v: memtable %d MiB, want %d MiB", o.ExpectedRate, o.Window, got>>20, tc.want>>20)
		}
		if got := blockCacheSize(o); got != int64(tc.want) {
			t.Errorf("ExpectedRate %v, Window %v: block cache %d MiB, want %d MiB", o.ExpectedRate, o.Window, got>>20, tc.want>>20)
		}
	}
}
