package kafka

import (
	"testing"
	"time"

	"github.com/streamdedup/dedup"
)

// TestLookbackCoversAutoWindow checks that a rebuild replays the longest
// window under AutoWindow, whatever window is in force: a key held for it
// is found again.
func TestLookbackCoversAutoWindow(t *testing.T) {
	fixed := *(&dedup.Options{Window: 4 * time.Minute}).WithDefaults()
	if got := lookback(fixed); got != 5*time.Minute {
		t.Errorf("fixed: lookback = %v, want 5m", got)
	}
	auto := *(&dedup.Options{AutoWindow: &dedup.AutoWindow{Min: 4 * time.Minute, Max: 40 * time.Minute}}).WithDefaults()
	if got := lookback(auto); got != 41*time.Minute {
		t.Errorf("auto: lookback = %v, want 41m", got)
	}
}
