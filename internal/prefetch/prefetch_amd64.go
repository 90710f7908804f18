// Package prefetch starts loading cache lines ahead of their use.
//
// Go has no prefetch intrinsic. Probing a large table for many keys at
// once waits for one memory miss per key; asking for the lines of the keys
// a few places ahead lets those misses overlap (filter blocks in
// ObserveBatch and in the commit's inserts, in-flight sets in the engine).
// A hint only: it never faults and changes no result.
package prefetch

import "unsafe"

// Addr asks the CPU to start loading the cache line at addr, without
// waiting for it (PREFETCHT0); the function is that one instruction.
//
//go:noescape
func Addr(addr unsafe.Pointer)

// Lines asks the CPU to start loading the n >= 1 consecutive 64-byte
// cache lines from addr (a PREFETCHT0 each, in one call): the lines of a
// wide lane table's bucket.
//
//go:noescape
func Lines(addr unsafe.Pointer, n int)
