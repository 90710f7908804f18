package filter

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/FastFilter/xorfilter"
	"github.com/cespare/xxhash/v2"
	"github.com/streamdedup/dedup/internal/prefetch"

	"github.com/streamdedup/dedup/internal/hashmix"
)

// FuseFilter is a static filter: a binary fuse filter (Graf and Lemire,
// "Binary Fuse Filters: Fast and Smaller Than Xor Filters", 2022) built once
// from a set of hashes, with fingerprints of any width from 1 to 16 bits,
// bit-packed. It holds about 1.125*width bits per hash (a little more below
// a million hashes) for a false-positive rate of 2^-width, against 1.44*log2(1/fp)
// for a Bloom filter: at 0.2% (9 bits) 1.27 bytes a key, where a blocked
// filter takes 1.74. A lookup reads three fingerprints in three consecutive
// segments of the table: three cache lines of a large filter, against one
// for blocked.
//
// It cannot take new hashes into its table. Hashes given to Add after the
// build (a sealed generation's late commits) go into a small blocked
// overflow filter made on the first such Add, at the target given to
// BuildFuse, so the filter keeps the [Filter] contract.
//
// The table is built by github.com/FastFilter/xorfilter's BinaryFuse[uint16]
// and keeps the low width bits of each entry: the filter's equation
// F[h0]^F[h1]^F[h2] = fingerprint holds bit by bit, so it holds for any
// mask of the bits.
type FuseFilter struct {
	seed        uint64
	segLen      uint32
	segMask     uint32
	segCount    uint32
	segCountLen uint32
	width       uint8
	mask        uint32
	// n is the number of hashes the table was built from.
	n uint64
	// data holds the fingerprints, slot i at bits [i*width, (i+1)*width)
	// little-endian, plus fusePad bytes so that every slot reads as one
	// unaligned uint32.
	data []byte
	// lateFP is the target of the overflow filter; over is nil until a
	// hash is added after the build.
	lateFP float64
	over   Filter
}

// MaxFuseWidth is the widest fingerprint a FuseFilter keeps.
const MaxFuseWidth = 16

const (
	fusePad     = 4
	maxFuseKeys = 1<<32 - 1 // the library indexes the table with uint32
	// lateCapacity is the capacity of the overflow filter's first link.
	lateCapacity = 1024
)

// BuildFuse returns a FuseFilter holding hashes, with fingerprints of width
// bits (false-positive rate 2^-width) and an overflow for later Adds at
// lateFP. It reorders hashes and may drop duplicates from it. It needs
// about 25 bytes a hash of transient memory (the library's construction
// arrays) besides hashes.
func BuildFuse(hashes []uint64, width int, lateFP float64) (*FuseFilter, error) {
	switch {
	case width < 1 || width > MaxFuseWidth:
		return nil, fmt.Errorf("filter: fuse width must be in [1, %d], got %d", MaxFuseWidth, width)
	case !(lateFP > 0 && lateFP < 1):
		return nil, fmt.Errorf("filter: fuse late fp must be in (0, 1), got %g", lateFP)
	case uint64(len(hashes)) > maxFuseKeys:
		return nil, fmt.Errorf("filter: fuse of %d hashes, over %d", len(hashes), uint64(maxFuseKeys))
	}
	f := &FuseFilter{width: uint8(width), mask: 1<<width - 1, lateFP: lateFP}
	if len(hashes) == 0 {
		f.setGeometry(0, 4, 1)
		f.data = make([]byte, f.dataLen())
		return f, nil
	}
	bf, err := xorfilter.NewBinaryFuse[uint16](hashes)
	if err != nil {
		// The library retries with new seeds, and prunes duplicates it
		// cannot peel; give it distinct hashes once more before failing.
		slices.Sort(hashes)
		hashes = slices.Compact(hashes)
		bf, err = xorfilter.NewBinaryFuse[uint16](hashes)
	}
	if err != nil {
		return nil, fmt.Errorf("filter: build fuse of %d hashes: %w", len(hashes), err)
	}
	f.setGeometry(bf.Seed, bf.SegmentLength, bf.SegmentCount)
	if uint64(len(bf.Fingerprints)) != f.slots() {
		return nil, fmt.Errorf("filter: internal error: fuse table of %d slots, geometry says %d", len(bf.Fingerprints), f.slots())
	}
	// The library drops duplicates it finds; n counts the hashes given,
	// which a journal of distinct inserts holds once each.
	f.n = uint64(len(hashes))
	f.data = make([]byte, f.dataLen())
	w := uint64(width)
	for i, v := range bf.Fingerprints {
		bit := uint64(i) * w
		p := f.data[bit>>3:]
		x := binary.LittleEndian.Uint32(p) | (uint32(v)&f.mask)<<(bit&7)
		binary.LittleEndian.PutUint32(p, x)
	}
	return f, nil
}

func (f *FuseFilter) setGeometry(seed uint64, segLen, segCount uint32) {
	f.seed, f.segLen, f.segMask, f.segCount = seed, segLen, segLen-1, segCount
	f.segCountLen = segCount * segLen
}

// slots is the table's length: the segments a hash starts in, plus the two
// after the last.
func (f *FuseFilter) slots() uint64 { return uint64(f.segCount+2) * uint64(f.segLen) }

func (f *FuseFilter) dataLen() uint64 {
	return (f.slots()*uint64(f.width)+7)/8 + fusePad
}

// The library's hash mixing (xorfilter.go, Apache-2.0: murmur3's fmix64
// of the seeded hash): the filter must derive positions and fingerprints
// from a hash exactly as it built them.
func fuseMix(h, seed uint64) uint64 { return hashmix.Fmix64(h + seed) }

// positions is the library's getHashFromHash.
func (f *FuseFilter) positions(hash uint64) (uint64, uint64, uint64) {
	hi := (hash >> 32) * uint64(f.segCountLen)
	lo := (hash & 0xffffffff) * uint64(f.segCountLen)
	h0 := uint32((hi + lo>>32) >> 32) // high 64 bits of hash*segCountLen
	h1 := h0 + f.segLen
	h2 := h1 + f.segLen
	h1 ^= uint32(hash>>18) & f.segMask
	h2 ^= uint32(hash) & f.segMask
	return uint64(h0), uint64(h1), uint64(h2)
}

func (f *FuseFilter) slot(i uint64) uint32 {
	bit := i * uint64(f.width)
	return binary.LittleEndian.Uint32(f.data[bit>>3:]) >> (bit & 7)
}

// testTable reports whether the table may hold h.
func (f *FuseFilter) testTable(h uint64) bool {
	if f.n == 0 {
		return false
	}
	hash := fuseMix(h, f.seed)
	fp := uint32(hash ^ hash>>32)
	h0, h1, h2 := f.positions(hash)
	return (fp^f.slot(h0)^f.slot(h1)^f.slot(h2))&f.mask == 0
}

// Test implements [Filter].
func (f *FuseFilter) Test(h uint64) bool {
	return f.testTable(h) || (f.over != nil && f.over.Test(h))
}

// Prefetch implements [Prefetcher]: the three lines of the table.
func (f *FuseFilter) Prefetch(h uint64) {
	if f.n == 0 {
		return
	}
	h0, h1, h2 := f.positions(fuseMix(h, f.seed))
	w := uint64(f.width)
	base := unsafe.Pointer(unsafe.SliceData(f.data))
	prefetch.Addr(unsafe.Add(base, h0*w>>3))
	prefetch.Addr(unsafe.Add(base, h1*w>>3))
	prefetch.Addr(unsafe.Add(base, h2*w>>3))
}

// TestOrAdd implements [Filter]: a hash the table does not hold goes into
// the overflow filter.
func (f *FuseFilter) TestOrAdd(h uint64) bool {
	if f.testTable(h) {
		return true
	}
	if f.over == nil {
		o, err := New(Blocked, lateCapacity, f.lateFP)
		if err != nil {
			// lateFP was validated by BuildFuse or Unmarshal: New cannot fail.
			panic(fmt.Sprintf("filter: fuse overflow: %v", err))
		}
		f.over = o
	}
	return f.over.TestOrAdd(h)
}

// Add implements [Filter].
func (f *FuseFilter) Add(h uint64) { f.TestOrAdd(h) }

// Count implements [Filter]: the hashes of the table and of the overflow.
func (f *FuseFilter) Count() uint64 {
	if f.over != nil {
		return f.n + f.over.Count()
	}
	return f.n
}

// Capacity implements [Filter]: the table is full; the overflow's capacity
// is added once it exists.
func (f *FuseFilter) Capacity() uint64 {
	if f.over != nil {
		return max(f.n, 1) + f.over.Capacity()
	}
	return max(f.n, 1)
}

// SizeBytes implements [Filter].
func (f *FuseFilter) SizeBytes() uint64 {
	n := uint64(len(f.data))
	if f.over != nil {
		n += f.over.SizeBytes()
	}
	return n
}

// Width returns the fingerprint width in bits.
func (f *FuseFilter) Width() int { return int(f.width) }

// Late returns the overflow filter of hashes added after the build, nil if
// none.
func (f *FuseFilter) Late() Filter { return f.over }

// FPRate implements [Filter]: 2^-width for the table (0 if it is empty),
// compounded with the overflow's estimate.
func (f *FuseFilter) FPRate() float64 {
	p := 0.0
	if f.n > 0 {
		p = math.Ldexp(1, -int(f.width))
	}
	if f.over != nil {
		p = 1 - (1-p)*(1-f.over.FPRate())
	}
	return p
}

// Kind implements [Filter].
func (f *FuseFilter) Kind() Kind { return Fuse }

// FuseWidth returns the narrowest fingerprint width whose rate 2^-width
// is at most fp, within [1, MaxFuseWidth].
func FuseWidth(fp float64) int {
	w := int(math.Ceil(-math.Log2(fp)))
	return min(max(w, 1), MaxFuseWidth)
}

// FuseBytes returns the table memory BuildFuse takes for n distinct hashes
// at width bits (without an overflow).
func FuseBytes(n uint64, width int) uint64 {
	if n == 0 {
		n = 1
	}
	factor := 1.125
	if n > 1 {
		factor = max(1.125, 0.875+0.25*math.Log(1e6)/math.Log(float64(n)))
	}
	return uint64(float64(n)*factor*float64(width)/8) + fusePad
}

// Fuse encoding (version 1), all integers little-endian:
//
//	[0:4]   magic "DDFU"
//	[4]     format version (1)
//	[5]     kind (5, fuse)
//	[6]     fingerprint width in bits, 1..16
//	[7]     0
//	[8:16]  seed
//	[16:20] segment length (a power of two)
//	[20:24] segment count (the table has segment count + 2 segments)
//	[24:32] distinct hashes in the table
//	[32:40] overflow target, float64 bits
//	[40:48] table bytes: ceil(slots*width/8) + 4
//	table
//	u64 overflow length (0: none), then the overflow's own encoding (a
//	blocked filter's, see encoding.go)
//	trailer: xxhash64 of every byte before it.
const (
	fuseMagic     = "DDFU"
	fuseVersion   = 1
	fuseHeaderLen = 48
	maxSegLen     = 1 << 18 // the library's bound
)

// MarshalBinary implements [Filter].
func (f *FuseFilter) MarshalBinary() ([]byte, error) {
	var over []byte
	if f.over != nil {
		var err error
		if over, err = f.over.MarshalBinary(); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, fuseHeaderLen+len(f.data)+8+len(over)+trailerLen)
	b = append(b, fuseMagic...)
	b = append(b, fuseVersion, byte(Fuse), f.width, 0)
	b = binary.LittleEndian.AppendUint64(b, f.seed)
	b = binary.LittleEndian.AppendUint32(b, f.segLen)
	b = binary.LittleEndian.AppendUint32(b, f.segCount)
	b = binary.LittleEndian.AppendUint64(b, f.n)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.lateFP))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(f.data)))
	b = append(b, f.data...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(over)))
	b = append(b, over...)
	return binary.LittleEndian.AppendUint64(b, xxhash.Sum64(b)), nil
}

// unmarshalFuse decodes a FuseFilter encoding (magic checked by the caller).
func unmarshalFuse(data []byte) (*FuseFilter, error) {
	if len(data) < fuseHeaderLen+8+trailerLen {
		return nil, corrupt("fuse: %d bytes, shorter than header, overflow length and checksum", len(data))
	}
	body := data[:len(data)-trailerLen]
	if got, want := xxhash.Sum64(body), binary.LittleEndian.Uint64(data[len(body):]); got != want {
		return nil, corrupt("fuse: checksum mismatch (%016x, stored %016x)", got, want)
	}
	if data[4] != fuseVersion {
		return nil, corrupt("fuse: unsupported format version %d", data[4])
	}
	width := data[6]
	if Kind(data[5]) != Fuse || width < 1 || width > MaxFuseWidth || data[7] != 0 {
		return nil, corrupt("fuse: kind %d, width %d", data[5], width)
	}
	f := &FuseFilter{width: width, mask: 1<<width - 1}
	segLen := binary.LittleEndian.Uint32(data[16:])
	segCount := binary.LittleEndian.Uint32(data[20:])
	if segLen < 1 || segLen > maxSegLen || segLen&(segLen-1) != 0 || segCount < 1 || uint64(segCount)*uint64(segLen) > maxFuseKeys {
		return nil, corrupt("fuse: segment length %d, count %d", segLen, segCount)
	}
	f.setGeometry(binary.LittleEndian.Uint64(data[8:]), segLen, segCount)
	f.n = binary.LittleEndian.Uint64(data[24:])
	if f.n > f.slots() {
		return nil, corrupt("fuse: %d hashes in %d slots", f.n, f.slots())
	}
	f.lateFP = math.Float64frombits(binary.LittleEndian.Uint64(data[32:]))
	if !(f.lateFP > 0 && f.lateFP < 1) {
		return nil, corrupt("fuse: overflow target %g", f.lateFP)
	}
	dl := binary.LittleEndian.Uint64(data[40:])
	rest := body[fuseHeaderLen:]
	if dl != f.dataLen() || dl > uint64(len(rest))-8 {
		return nil, corrupt("fuse: table of %d bytes, geometry needs %d, %d left", dl, f.dataLen(), len(rest))
	}
	f.data = append([]byte(nil), rest[:dl]...)
	rest = rest[dl:]
	ol := binary.LittleEndian.Uint64(rest)
	rest = rest[8:]
	if ol != uint64(len(rest)) {
		return nil, corrupt("fuse: overflow of %d bytes, %d left", ol, len(rest))
	}
	if ol > 0 {
		o, err := Unmarshal(rest)
		if err != nil {
			return nil, corrupt("fuse: overflow: %v", err)
		}
		if o.Kind() != Blocked {
			return nil, corrupt("fuse: overflow is a %v filter", o.Kind())
		}
		f.over = o
	}
	return f, nil
}
