//go:build !linux

package filter

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }
