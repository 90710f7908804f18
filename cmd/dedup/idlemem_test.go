package main

import "testing"

// TestIdleReleaseOncePerPause pins when dedup serve gives the heap's free
// pages back: at the first quiet tick after traffic, once per pause, never
// while commands arrive, not at start.
func TestIdleReleaseOncePerPause(t *testing.T) {
	r := idleRelease{released: true}
	steps := []struct {
		commands uint64
		want     bool
	}{
		{0, false},    // idle from the start: nothing to give back
		{100, false},  // traffic
		{900, false},  // traffic
		{900, true},   // first quiet tick: release
		{900, false},  // still quiet: once
		{901, false},  // traffic again
		{901, true},   // pause: release again
		{5000, false}, // traffic
	}
	for i, s := range steps {
		if got := r.tick(s.commands); got != s.want {
			t.Fatalf("tick %d (commands %d) = %v, want %v", i, s.commands, got, s.want)
		}
	}
}
