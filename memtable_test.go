package dedup

import (
	"testing"
	"time"
)

// TestMemTableSize: the exact store's memtable follows the workload the
// options describe, a full window's keys at 128 bytes each, as a power of
// two within [4 MiB, 64 MiB].
func TestMemTableSize(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want uint64
	}{
		{Options{}, 64 << 20}, // 10000 keys/s over 1h15m: 1.4 GB
		{Options{ExpectedRate: 10, Window: time.Minute}, 4 << 20},         // 96 kB
		{Options{ExpectedRate: 100, Window: time.Minute}, 4 << 20},        // 960 kB
		{Options{ExpectedRate: 100, Window: 10 * time.Minute}, 16 << 20},  // 9.6 MB
		{Options{ExpectedRate: 1000, Window: 10 * time.Minute}, 64 << 20}, // 96 MB
	} {
		o := tc.o
		if got := memTableSize(*o.WithDefaults()); got != tc.want {
			t.Errorf("ExpectedRate %v, Window %v: memtable %d MiB, want %d MiB", o.ExpectedRate, o.Window, got>>20, tc.want>>20)
		}
	}
}
