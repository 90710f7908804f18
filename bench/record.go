package bench

import (
	"fmt"
	"math"
	"time"
	"unsafe"
)

// recorded is the pre-generated stream every target of a comparison gets.
// Its arrays live outside the Go heap (see offHeap), so that the garbage
// collector's heap goal, which grows with everything live on the heap,
// follows the target's memory and not the harness's copy of the stream:
// otherwise the target's RSS would include headroom sized by the stream.
type recorded struct {
	buf []byte          // the keys, back to back
	off []uint32        // key i is buf[off[i]:off[i+1]]
	at  []time.Duration // arrival time of each event
	dup []bool          // the event is a duplicate
	mem [][]byte        // the off-heap regions, for free
}

func (r *recorded) len() int         { return len(r.at) }
func (r *recorded) key(i int) []byte { return r.buf[r.off[i]:r.off[i+1]:r.off[i+1]] }

// free returns the off-heap regions.
func (r *recorded) free() {
	for _, m := range r.mem {
		freeOffHeap(m)
	}
	r.mem = nil
}

// offHeapSlice returns a zeroed slice of n Ts outside the Go heap (T holds
// no pointers).
func offHeapSlice[T any](r *recorded, n int) ([]T, error) {
	var zero T
	size := max(n*int(unsafe.Sizeof(zero)), 1)
	m, err := offHeap(size)
	if err != nil {
		return nil, err
	}
	r.mem = append(r.mem, m)
	return unsafe.Slice((*T)(unsafe.Pointer(&m[0])), n), nil
}

// record generates the stream twice: once to size the arrays, once to
// fill them.
func record(sc StreamOptions, window time.Duration) (_ *recorded, err error) {
	st, err := NewStream(sc)
	if err != nil {
		return nil, err
	}
	var ev Event
	n, size := 0, 0
	for st.Next(&ev) {
		n++
		size += len(ev.Key)
	}
	if uint64(size) > math.MaxUint32 {
		return nil, fmt.Errorf("bench: a recorded stream of %d key bytes: at most 4 GiB", size)
	}
	r := &recorded{}
	defer func() {
		if err != nil {
			r.free()
		}
	}()
	if r.buf, err = offHeapSlice[byte](r, size); err != nil {
		return nil, err
	}
	if r.off, err = offHeapSlice[uint32](r, n+1); err != nil {
		return nil, err
	}
	if r.at, err = offHeapSlice[time.Duration](r, n); err != nil {
		return nil, err
	}
	if r.dup, err = offHeapSlice[bool](r, n); err != nil {
		return nil, err
	}
	if st, err = NewStream(sc); err != nil {
		return nil, err
	}
	pos := 0
	for i := 0; st.Next(&ev); i++ {
		r.off[i] = uint32(pos)
		pos += copy(r.buf[pos:], ev.Key)
		r.at[i], r.dup[i] = ev.At, ev.Dup
	}
	r.off[n] = uint32(pos)
	return r, nil
}
