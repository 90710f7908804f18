// Package sysmem reports the machine's physical memory.
package sysmem

import "syscall"

// Total returns the physical memory in bytes, or 0 if unknown.
func Total() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return si.Totalram * uint64(si.Unit)
}
