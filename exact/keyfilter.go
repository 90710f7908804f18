package exact

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/streamdedup/dedup/internal/prefetch"
)

// Each flush writes the keys of a generation as a key range of their own
// (tagFlushKey, generation, flush), so that no two tables overlap: Pebble
// places every ingested table in the last level and never compacts one,
// and a lookup reads one table. Which flush of a generation may hold a key
// is told by a blocked Bloom filter per (generation, flush), kept in
// memory (1.25 bytes per key) and stored, in the same ingestion as the
// keys, under tagFilter. Pebble's own per-table filters, one block per
// table, would be read from disk on a cache miss (1.75 MB for a 64 MiB
// flush): at 100M keys, lookups checked 18 overlapping tables and took
// 0.2-1.5 ms.

// filterBitsPerKey sizes the filters: about 1% false positives, so a
// lookup of an absent key reads a table once per hundred flushes.
const filterBitsPerKey = 10

// filterProbes is the number of bits set per key, all in one 512-bit block.
const filterProbes = 7

// keyFilter is a blocked Bloom filter: a key sets filterProbes bits of one
// 64-byte block.
type keyFilter struct {
	words []uint64 // 8 per block
}

func newKeyFilter(keys int) keyFilter {
	blocks := max(1, (keys*filterBitsPerKey+511)/512)
	return keyFilter{words: make([]uint64, 8*blocks)}
}

// block returns the first word of h's block.
func (f keyFilter) block(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(f.words)/8))
	return int(hi) * 8
}

func (f keyFilter) add(h uint64) {
	b := f.block(h)
	p := h * 0x9e3779b97f4a7c15
	for i := 0; i < filterProbes; i++ {
		bit := p >> 55 // 9 bits: one of 512
		f.words[b+int(bit>>6)] |= 1 << (bit & 63)
		p = p<<9 | p>>55
	}
}

// addAll adds the keys of hashes hs, prefetching the blocks of those a few
// places ahead: a filter of a flush is megabytes, and its blocks are
// cache misses taken in turn otherwise.
func (f keyFilter) addAll(hs []uint64) {
	const ahead = 16
	for i, h := range hs {
		if j := i + ahead; j < len(hs) {
			prefetch.Addr(unsafe.Pointer(&f.words[f.block(hs[j])]))
		}
		f.add(h)
	}
}

func (f keyFilter) mayContain(h uint64) bool {
	b := f.block(h)
	p := h * 0x9e3779b97f4a7c15
	for i := 0; i < filterProbes; i++ {
		bit := p >> 55
		if f.words[b+int(bit>>6)]&(1<<(bit&63)) == 0 {
			return false
		}
		p = p<<9 | p>>55
	}
	return true
}

// filterFormat is the first byte of a stored filter.
const filterFormat = 1

func (f keyFilter) marshal() []byte {
	out := make([]byte, 1, 1+8*len(f.words))
	out[0] = filterFormat
	for _, w := range f.words {
		out = binary.LittleEndian.AppendUint64(out, w)
	}
	return out
}

func unmarshalKeyFilter(b []byte) (keyFilter, error) {
	if len(b) < 1+64 || b[0] != filterFormat || (len(b)-1)%64 != 0 {
		return keyFilter{}, fmt.Errorf("%w: key filter of %d bytes", ErrCorrupt, len(b))
	}
	f := keyFilter{words: make([]uint64, (len(b)-1)/8)}
	for i := range f.words {
		f.words[i] = binary.LittleEndian.Uint64(b[1+8*i:])
	}
	return f, nil
}

// flushFilter is the filter of the keys one flush wrote for a generation.
type flushFilter struct {
	flush  uint64
	filter keyFilter
}

// flushFilters holds the filters of the flushes of every live generation.
type flushFilters struct {
	mu    sync.RWMutex
	byGen map[uint64][]flushFilter // flushes in order
}

// add adds the filter of a flush of gen, or replaces the one of the same
// flush (a flush done again after a crash).
func (ff *flushFilters) add(gen uint64, f flushFilter) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.byGen == nil {
		ff.byGen = make(map[uint64][]flushFilter)
	}
	fs := ff.byGen[gen]
	if i := slices.IndexFunc(fs, func(x flushFilter) bool { return x.flush == f.flush }); i >= 0 {
		fs[i] = f
		return
	}
	ff.byGen[gen] = append(fs, f)
}

// candidates appends to dst the flushes of gen whose filter may hold a key
// of hash h, newest first.
func (ff *flushFilters) candidates(dst []uint64, gen, h uint64) []uint64 {
	ff.mu.RLock()
	defer ff.mu.RUnlock()
	fs := ff.byGen[gen]
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i].filter.mayContain(h) {
			dst = append(dst, fs[i].flush)
		}
	}
	return dst
}

// dropBefore forgets the filters of the generations below floor.
func (ff *flushFilters) dropBefore(floor uint64) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	for gen := range ff.byGen {
		if gen < floor {
			delete(ff.byGen, gen)
		}
	}
}

// bytes returns the memory the filters take.
func (ff *flushFilters) bytes() int {
	ff.mu.RLock()
	defer ff.mu.RUnlock()
	n := 0
	for _, fs := range ff.byGen {
		for _, f := range fs {
			n += 8 * len(f.filter.words)
		}
	}
	return n
}

// gens returns the generations that have filters, in order.
func (ff *flushFilters) gens() []uint64 {
	ff.mu.RLock()
	defer ff.mu.RUnlock()
	var out []uint64
	for g := range ff.byGen {
		out = append(out, g)
	}
	slices.Sort(out)
	return out
}
