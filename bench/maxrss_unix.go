//go:build unix

package bench

import (
	"os"
	"runtime"
	"syscall"
)

// maxRSS is a finished process's peak resident set in bytes (ru_maxrss:
// kilobytes on Linux, bytes on macOS).
func maxRSS(ps *os.ProcessState) uint64 {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru.Maxrss < 0 {
		return 0
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return uint64(ru.Maxrss)
	}
	return uint64(ru.Maxrss) << 10
}
