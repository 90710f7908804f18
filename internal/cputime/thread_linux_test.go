//go:build linux

package cputime

import (
	"runtime"
	"testing"
	"time"
)

func TestThreadGrowsWithWork(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, ok := Thread(); !ok {
		t.Fatal("Thread() reports no measurement on Linux")
	}
	read := func() time.Duration { d, _ := Thread(); return d }
	if got := spin(read, 20*time.Millisecond); got < 20*time.Millisecond {
		t.Fatalf("Thread() rose by %v during 10 s of spinning, want at least 20ms", got)
	}
}
