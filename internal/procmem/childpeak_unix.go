//go:build unix

package procmem

import (
	"os"
	"runtime"
	"syscall"
)

// ChildPeak is a finished process's peak resident set in bytes, from its
// resource usage (ru_maxrss: kilobytes on Linux, bytes on macOS), as
// /usr/bin/time -v reports it.
func ChildPeak(ps *os.ProcessState) uint64 {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru.Maxrss < 0 {
		return 0
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return uint64(ru.Maxrss)
	}
	return uint64(ru.Maxrss) << 10
}
