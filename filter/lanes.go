package filter

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/streamdedup/dedup/internal/prefetch"
)

// LaneView is one lane of a [LaneTable] seen as a [Filter]: the
// filter of one generation of a ring whose generations share the table
// (package rotate places them). Past the lane's capacity it grows like
// every filter here, by chaining an overflow filter (blocked, at its own
// share of the target, sized for a quarter of the lane and doubling from
// there), so a burst costs memory and one more probe for that generation,
// not accuracy.
//
// New(Interleaved, capacity, fp) returns a view of a one-lane table of its
// own; MarshalBinary encodes the lane alone (its fields of every word,
// packed) with the table's geometry, and Unmarshal returns it as a view of
// a table of that geometry holding just that lane, which a ring may move
// into a shared table with [LaneView.MoveTo].
//
// The table's words are shared with the other lanes' views: a view's
// MarshalBinary reads words that inserts into other lanes write, so it
// must run under the lock that serialises those inserts, unlike other
// filters' MarshalBinary ([SharesMemory] reports it).
type LaneView struct {
	t      *LaneTable
	lane   int
	over   Filter  // overflow past the lane's capacity; nil until needed
	overFP float64 // the overflow filter's target
	// journal, when not nil, holds every hash given to the view, so that
	// the lane can be rebuilt in a table of another size (Regrow); onFull,
	// when set, is asked to make room before the lane overflows.
	journal []uint64
	onFull  func(*LaneView) bool
}

// StartJournal makes the view remember every hash it is given from now on
// (8 bytes each), so that Regrow can rebuild the lane in a table of
// another size; onFull, if not nil, is called when the lane is full, and
// returns whether it made room (by a Regrow). The view must be empty.
func (v *LaneView) StartJournal(onFull func(*LaneView) bool) {
	v.journal = make([]uint64, 0, 64)
	v.onFull = onFull
}

// StopJournal forgets the journal; the lane overflows as usual from now
// on.
func (v *LaneView) StopJournal() { v.journal, v.onFull = nil, nil }

// Journaling reports whether the view keeps a journal.
func (v *LaneView) Journaling() bool { return v.journal != nil }

// Regrow rebuilds the journaling view's lane in lane Lane() of t (empty,
// of the view's lane count): every hash of the journal is added there and
// the view becomes a view of t. The old table is left as it was.
func (v *LaneView) Regrow(t *LaneTable) error {
	if v.journal == nil {
		return fmt.Errorf("filter: Regrow of a lane that keeps no journal")
	}
	if t.lanes != v.t.lanes || t.wide != v.t.wide || t.count[v.lane] != 0 {
		return fmt.Errorf("filter: Regrow into a %d-lane table with %d keys in lane %d", t.lanes, t.count[v.lane], v.lane)
	}
	if v.over != nil {
		return fmt.Errorf("filter: Regrow of a lane that overflowed")
	}
	v.t = t
	t.AddBatch(v.journal, v.lane)
	return nil
}

// overflowShare is the part of a target that New(Interleaved) leaves to
// the overflow filter: the lane gets the rest.
const overflowShare = 1.0 / 32

// SharesMemory reports whether f's MarshalBinary reads memory that other
// filters' inserts write (true for a [LaneView]), so that it must not run
// concurrently with inserts into those filters.
func SharesMemory(f Filter) bool {
	_, ok := f.(*LaneView)
	return ok
}

// NewLaneView returns a view of lane l of t whose overflow filter, once the
// lane is full, is a blocked filter at target overflowFP. The lane should
// be empty and not viewed by another view.
func NewLaneView(t *LaneTable, l int, overflowFP float64) (*LaneView, error) {
	if l < 0 || l >= t.lanes {
		return nil, fmt.Errorf("filter: lane %d of a %d-lane table", l, t.lanes)
	}
	if !(overflowFP > 0 && overflowFP < 1) {
		return nil, fmt.Errorf("filter: overflow fp must be in (0, 1), got %g", overflowFP)
	}
	return &LaneView{t: t, lane: l, overFP: overflowFP}, nil
}

func newLaneFilter(capacity uint64, fp float64, wide bool) (*LaneView, error) {
	t, err := NewLaneTable(LaneTableOptions{Lanes: 1, Capacity: capacity, FalsePositiveRate: fp * (1 - overflowShare), Wide: wide})
	if err != nil {
		return nil, err
	}
	return NewLaneView(t, 0, fp*overflowShare)
}

// Table returns the table the view's lane belongs to.
func (v *LaneView) Table() *LaneTable { return v.t }

// Lane returns the view's lane of Table.
func (v *LaneView) Lane() int { return v.lane }

// Overflowed reports whether the lane outgrew its capacity and chained an
// overflow filter.
func (v *LaneView) Overflowed() bool { return v.over != nil }

// Overflow returns the overflow filter (nil if none): a ring probing the
// table itself must ask it too.
func (v *LaneView) Overflow() Filter { return v.over }

// MoveTo ORs the view's lane into lane l of t, which must have the view's
// table's geometry, and makes the view a view of that lane. The old table
// is no longer referenced by the view.
func (v *LaneView) MoveTo(t *LaneTable, l int) error {
	s := v.t
	if !s.sameGeometry(t) {
		return fmt.Errorf("filter: lane of a %s table moved to a %s table", s.geometry(), t.geometry())
	}
	if l < 0 || l >= t.lanes {
		return fmt.Errorf("filter: lane %d of a %d-lane table", l, t.lanes)
	}
	if s == t && l == v.lane {
		return nil
	}
	if s.wide {
		wideMove(s, t, v.lane, l)
		t.count[l] += s.count[v.lane]
		v.t, v.lane = t, l
		return nil
	}
	mask := uint64(1)<<s.width - 1
	from, to := uint(v.lane)*s.width, uint(l)*t.width
	for i, w := range s.words {
		t.words[i] |= (w >> from & mask) << to
	}
	t.count[l] += s.count[v.lane]
	v.t, v.lane = t, l
	return nil
}

func (t *LaneTable) sameGeometry(u *LaneTable) bool {
	return t.nbuckets == u.nbuckets && t.lanes == u.lanes && t.lines == u.lines && t.k == u.k && t.wide == u.wide &&
		t.cap == u.cap && t.fp == u.fp
}

func (t *LaneTable) geometry() string {
	layout := "packed"
	if t.wide {
		layout = "wide"
	}
	return fmt.Sprintf("%d-bucket %s %d-line %d-lane k=%d cap=%d fp=%g", t.nbuckets, layout, t.lines, t.lanes, t.k, t.cap, t.fp)
}

// SameGeometry reports whether t and u have the same buckets, lanes, bits
// per key, capacity and target, so that a lane of one can move to the
// other.
func (t *LaneTable) SameGeometry(u *LaneTable) bool { return t.sameGeometry(u) }

// Test reports whether h may be in the lane (or its overflow).
func (v *LaneView) Test(h uint64) bool {
	if v.t.has(h, v.lane) {
		return true
	}
	return v.over != nil && v.over.Test(h)
}

// TestOrAdd reports whether h may be held, then adds it: to the lane while
// it has room, then to the overflow filter.
func (v *LaneView) TestOrAdd(h uint64) bool {
	if v.journal != nil {
		v.journal = append(v.journal, h)
	}
	if v.over == nil && !v.t.Full(v.lane) {
		return v.t.addLane(h, v.lane) // one pass: the common case
	}
	if v.t.has(h, v.lane) {
		return true
	}
	if v.over != nil {
		return v.over.TestOrAdd(h)
	}
	if v.t.Full(v.lane) && v.onFull != nil && v.onFull(v) {
		// Rebuilt from the journal, which holds h.
		return false
	}
	if v.t.Full(v.lane) {
		// A quarter of the lane first: a generation that runs a little
		// over its estimate should not pay for a whole second lane; the
		// chain doubles from there.
		f, err := New(Blocked, max(v.t.cap/4, 64), v.overFP)
		if err != nil {
			// The overflow is sized like the lane, which exists: New
			// cannot refuse it. Keep the key in the lane rather than lose
			// it (a higher error rate, never a false negative).
			v.t.set(h, v.lane)
			return false
		}
		v.over = f
		return f.TestOrAdd(h)
	}
	v.t.set(h, v.lane)
	return false
}

// Add inserts h (see TestOrAdd).
func (v *LaneView) Add(h uint64) { v.TestOrAdd(h) }

// Prefetch starts loading the bucket of h; for a wide table only the
// view's line of it, the one its Test and Add read.
func (v *LaneView) Prefetch(h uint64) {
	if v.t.wide {
		prefetch.Addr(unsafe.Pointer(&v.t.words[v.t.wideLine(h, v.lane)]))
		return
	}
	v.t.Prefetch(h)
}

// Count returns the keys inserted into the lane and its overflow.
func (v *LaneView) Count() uint64 {
	n := v.t.count[v.lane]
	if v.over != nil {
		n += v.over.Count()
	}
	return n
}

// Capacity returns the lane's capacity plus the overflow's.
func (v *LaneView) Capacity() uint64 {
	n := v.t.cap
	if v.over != nil {
		n += v.over.Capacity()
	}
	return n
}

// SizeBytes returns the lane's share of the table plus the overflow's
// memory.
func (v *LaneView) SizeBytes() uint64 {
	n := v.t.SizeBytes() / uint64(v.t.lanes)
	if v.over != nil {
		n += v.over.SizeBytes()
	}
	return n
}

// FPRate estimates the rate of a lookup of the lane and its overflow.
func (v *LaneView) FPRate() float64 {
	q := 1 - v.t.LaneFPRate(v.lane)
	if v.over != nil {
		q *= 1 - v.over.FPRate()
	}
	return 1 - q
}

// Kind returns Wide for a lane of a wide table, else Interleaved.
func (v *LaneView) Kind() Kind {
	if v.t.wide {
		return Wide
	}
	return Interleaved
}

// Encoding of a lane (version 1), little-endian:
//
//	[0:4]   magic "DDLN"
//	[4]     format version (1)
//	[5]     lanes of the table, 1..16
//	[6]     lines per bucket, 1 or 2
//	[7]     k, 1..8
//	[8:16]  buckets
//	[16:24] capacity per lane
//	[24:32] the table's target fp, float64 bits
//	[32:40] the overflow's target fp, float64 bits
//	[40:48] keys in the lane
//	[48:52] the lane's index in the table (where Unmarshal puts it)
//	[52:56] overflow length: 0, or the length of a filter encoding
//	then the lane's field of every word, 64/lanes bits each, packed
//	little-endian into ceil(words*width/64) words,
//	then the overflow filter's encoding (MarshalBinary) if any,
//	then xxhash64 of every byte before it.
const (
	laneMagic   = "DDLN"
	laneVersion = 1
	laneHead    = 56
)

// MarshalBinary encodes the lane in the format above.
func (v *LaneView) MarshalBinary() ([]byte, error) {
	t := v.t
	var over []byte
	if v.over != nil {
		var err error
		if over, err = v.over.MarshalBinary(); err != nil {
			return nil, err
		}
	}
	packed := packedWords(uint64(len(t.words)), t.width)
	if t.wide {
		packed = t.nbuckets * blockWords
	}
	size := laneHead + 8*int(packed) + len(over) + trailerLen
	b := make([]byte, 0, size)
	if t.wide {
		b = append(b, wideLaneMagic...)
	} else {
		b = append(b, laneMagic...)
	}
	b = append(b, laneVersion, byte(t.lanes), byte(t.lines), byte(t.k))
	b = binary.LittleEndian.AppendUint64(b, t.nbuckets)
	b = binary.LittleEndian.AppendUint64(b, t.cap)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(t.fp))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v.overFP))
	b = binary.LittleEndian.AppendUint64(b, t.count[v.lane])
	b = binary.LittleEndian.AppendUint32(b, uint32(v.lane))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(over)))
	if t.wide {
		b = t.appendWideLane(b, v.lane)
		b = append(b, over...)
		b = wideLaneSum(b)
		if len(b) != size {
			return nil, fmt.Errorf("filter: internal error: encoded %d lane bytes, expected %d", len(b), size)
		}
		return b, nil
	}
	// Pack: field i of the lane goes to bits [i*F, (i+1)*F) of the stream.
	var acc uint64
	var n uint
	mask := uint64(1)<<t.width - 1
	from := uint(v.lane) * t.width
	for _, w := range t.words {
		f := w >> from & mask
		acc |= f << n
		n += t.width
		if n >= 64 {
			b = binary.LittleEndian.AppendUint64(b, acc)
			n -= 64
			acc = 0
			if n > 0 {
				acc = f >> (t.width - n)
			}
		}
	}
	if n > 0 {
		b = binary.LittleEndian.AppendUint64(b, acc)
	}
	b = append(b, over...)
	b = binary.LittleEndian.AppendUint64(b, xxhash.Sum64(b))
	if len(b) != size {
		return nil, fmt.Errorf("filter: internal error: encoded %d lane bytes, expected %d", len(b), size)
	}
	return b, nil
}

// packedWords is the number of 64-bit words that hold words fields of
// width bits.
func packedWords(words uint64, width uint) uint64 { return (words*uint64(width) + 63) / 64 }

// unmarshalLane decodes a lane encoded by LaneView.MarshalBinary into a
// view of a fresh table of the encoded geometry.
func unmarshalLane(data []byte) (*LaneView, error) {
	if len(data) < laneHead+trailerLen {
		return nil, corrupt("lane: %d bytes, shorter than header and checksum", len(data))
	}
	body := data[:len(data)-trailerLen]
	if got, want := xxhash.Sum64(body), binary.LittleEndian.Uint64(data[len(data)-trailerLen:]); got != want {
		return nil, corrupt("lane: checksum mismatch (%016x, stored %016x)", got, want)
	}
	if v := data[4]; v != laneVersion {
		return nil, corrupt("lane: unsupported format version %d", v)
	}
	wide := string(data[:4]) == wideLaneMagic
	lanes, lines, k := int(data[5]), int(data[6]), int(data[7])
	if wide {
		if err := wideCheck("lane", lines, k); err != nil {
			return nil, err
		}
	}
	nb := binary.LittleEndian.Uint64(data[8:])
	capacity := binary.LittleEndian.Uint64(data[16:])
	fp := math.Float64frombits(binary.LittleEndian.Uint64(data[24:]))
	overFP := math.Float64frombits(binary.LittleEndian.Uint64(data[32:]))
	count := binary.LittleEndian.Uint64(data[40:])
	lane := int(binary.LittleEndian.Uint32(data[48:]))
	overLen := uint64(binary.LittleEndian.Uint32(data[52:]))
	switch {
	case lanes < 1 || lanes > MaxLanes:
		return nil, corrupt("lane: %d lanes", lanes)
	case lines != 1 && lines != 2:
		return nil, corrupt("lane: %d lines per bucket", lines)
	case !wide && (k < 1 || k > maxInterleavedK):
		return nil, corrupt("lane: k %d", k)
	case nb < 1 || nb > maxBlocks:
		return nil, corrupt("lane: %d buckets", nb)
	case capacity < 1 || capacity > maxCapacity:
		return nil, corrupt("lane: capacity %d", capacity)
	case !(fp > 0 && fp < 1) || !(overFP > 0 && overFP < 1):
		return nil, corrupt("lane: fp %g, overflow fp %g", fp, overFP)
	case lane >= lanes:
		return nil, corrupt("lane: lane %d of %d", lane, lanes)
	case count > capacity:
		return nil, corrupt("lane: %d keys over capacity %d", count, capacity)
	}
	words := nb * uint64(lines) * blockWords
	width := uint(64 / lanes)
	packed := packedWords(words, width)
	if wide {
		packed = nb * blockWords
	}
	rest := body[laneHead:]
	if uint64(len(rest)) != 8*packed+overLen {
		return nil, corrupt("lane: %d buckets of %d lines and %d lanes and %d overflow bytes need %d bytes, have %d",
			nb, lines, lanes, overLen, 8*packed+overLen, len(rest))
	}
	if wide {
		t := newWide(nb, lanes, k)
		t.cap, t.fp = capacity, fp
		t.count[lane] = count
		t.readWideLane(rest[:8*packed], lane)
		return finishLane(t, lane, overFP, rest[8*packed:])
	}
	t := newInterleaved(nb, lanes, lines, k)
	t.cap, t.fp = capacity, fp
	t.count[lane] = count
	mask := uint64(1)<<width - 1
	to := uint(lane) * width
	src := rest[:8*packed]
	var acc uint64
	var n uint // bits of acc not yet used
	pi := 0
	for i := range t.words {
		var f uint64
		if n >= width {
			f = acc & mask
			acc >>= width
			n -= width
		} else {
			next := binary.LittleEndian.Uint64(src[8*pi:])
			pi++
			f = (acc | next<<n) & mask
			if n == 0 {
				acc = next >> width
			} else {
				acc = next >> (width - n)
			}
			n += 64 - width
		}
		t.words[i] = f << to
	}
	if n > 0 && acc != 0 {
		return nil, corrupt("lane: nonzero padding after the last field")
	}
	return finishLane(t, lane, overFP, rest[8*packed:])
}

// finishLane returns a view of lane of t with the encoded overflow filter
// over (none if empty).
func finishLane(t *LaneTable, lane int, overFP float64, over []byte) (*LaneView, error) {
	v := &LaneView{t: t, lane: lane, overFP: overFP}
	if len(over) > 0 {
		f, err := Unmarshal(over)
		if err != nil {
			return nil, fmt.Errorf("lane overflow: %w", err)
		}
		v.over = f
	}
	return v, nil
}
