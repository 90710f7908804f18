//go:build !unix

package bench

import "os"

// maxRSS is 0 where the kernel does not report a peak resident set.
func maxRSS(*os.ProcessState) uint64 { return 0 }
