package bench

import (
	"strings"
	"testing"
)

// TestServeTextPerKeySpace: with several key spaces, each dedup row's
// ratios are to the redis-server row of its own key space, and the chart
// draws one bar per target and size.
func TestServeTextPerKeySpace(t *testing.T) {
	r := &ServeResult{Config: ServeConfig{KeySpaces: []int{100_000, 1_000_000}}, Set: []ServeRow{
		{Target: "redis-server 7", KeySpace: 100_000, OpsPerSec: 100, Keys: 95_000, BytesPerKey: 120, RSSBytesPerKey: 120},
		{Target: "dedup serve exact", KeySpace: 100_000, OpsPerSec: 200, Keys: 95_000, BytesPerKey: 60, RSSBytesPerKey: 60},
		{Target: "redis-server 7", KeySpace: 1_000_000, OpsPerSec: 50, Keys: 950_000, BytesPerKey: 100, RSSBytesPerKey: 100},
		{Target: "dedup serve exact", KeySpace: 1_000_000, OpsPerSec: 300, Keys: 950_000, BytesPerKey: 25, RSSBytesPerKey: 25},
	}}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"-r K -n 3K", "2.00x", "1/2.0", "6.00x", "1/4.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if _, err := PlotServe(r, t.TempDir()); err != nil {
		t.Fatal(err)
	}
}
