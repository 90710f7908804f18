//go:build !linux

package exact

// offHeap returns n zeroed bytes of the heap: this platform's memtables
// stay there.
func offHeap(n int) ([]byte, bool) { return make([]byte, n), false }

// freeOffHeap does nothing here.
func freeOffHeap([]byte, bool) {}
