//go:build unix

package cputime

import (
	"testing"
	"time"
)

func TestProcessGrowsWithWork(t *testing.T) {
	if got := spin(Process, 20*time.Millisecond); got < 20*time.Millisecond {
		t.Fatalf("Process() rose by %v during 10 s of spinning, want at least 20ms", got)
	}
}
