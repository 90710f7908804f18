package filter

import "unsafe"

// prefetch asks the CPU to start loading the cache line at addr, without
// waiting for it (PREFETCHT0). Go has no prefetch intrinsic; this one
// instruction is the whole function.
//
//go:noescape
func prefetch(addr unsafe.Pointer)
