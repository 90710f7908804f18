//go:build !unix

package procmem

import "os"

// ChildPeak is 0 where the kernel does not report a finished process's
// peak resident set.
func ChildPeak(*os.ProcessState) uint64 { return 0 }
