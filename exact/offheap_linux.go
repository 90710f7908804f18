//go:build linux

package exact

import "syscall"

// offHeap returns n zeroed bytes mapped outside the Go heap, and whether
// they are (false: heap memory, when the mapping failed). Memtables keep
// their keys and index there, as Pebble keeps its own: the garbage
// collector neither counts them towards its next cycle (a heap twice the
// memtables' size) nor has them to reclaim, and a flushed memtable gives
// its memory back at once. Release them with freeOffHeap.
func offHeap(n int) ([]byte, bool) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n), false
	}
	return b, true
}

// freeOffHeap releases memory from offHeap that was mapped.
func freeOffHeap(b []byte, mapped bool) {
	if mapped {
		_ = syscall.Munmap(b[:cap(b)])
	}
}
