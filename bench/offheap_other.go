//go:build !unix

package bench

// offHeap allocates on the Go heap where anonymous mappings are not
// available; the recorded stream then counts in the garbage collector's
// heap goal.
func offHeap(size int) ([]byte, error) { return make([]byte, size), nil }

func freeOffHeap([]byte) {}
