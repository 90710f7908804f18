//go:build linux

package filter

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks the kernel to back a large table with transparent huge
// pages (MADV_HUGEPAGE), where THP is in "madvise" mode. Filter probes are
// random over the whole table: with 4 KiB pages nearly every probe of a
// table past a few MiB also misses the TLB and walks the page table. It is
// advice: failure changes nothing but speed. Called before the table is
// first written, so the first touch can fault huge pages in directly.
func adviseHuge(w []uint64) {
	const huge = 2 << 20
	if len(w)*8 < 2*huge {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	a := (start+huge-1)&^(huge-1) - start // first huge-page boundary, as an offset
	z := (start+uintptr(len(b)))&^(huge-1) - start
	if z <= a {
		return
	}
	_ = syscall.Madvise(b[a:z], 14 /* MADV_HUGEPAGE */)
}
