package exact

import (
	"encoding/binary"
	"fmt"
)

// Key tags: the first byte of every Pebble key (see the package doc).
const (
	tagMarker     = 0x00
	tagMeta       = 0x01
	tagCheckpoint = 0x02
	tagFloor      = 0x03
	tagSeq        = 0x04
	tagLog        = 0x05
	tagKey        = 0x06 // format 1: generation, key
	tagTruncated  = 0x07
	tagFlushKey   = 0x08 // generation, flush, key
	tagFilter     = 0x09 // generation, flush -> key filter
	tagEra        = 0x0a // the commit log's era: one per Open
	tagRecord     = 0x0b // generation, fingerprint -> result record
	tagSecret     = 0x0c // the fingerprint secret
	tagFP         = 0x0d // generation, flush, fingerprint
	tagFPFilter   = 0x0e // generation, flush -> filter of the fingerprints
	tagScratch    = 0x0f // tables ingested to restart Pebble's manifest (upgrade.go), excised at once
)

// formatVersion is the on-disk format written by this package: 2 adds the
// commit log, 3 keeps keyed fingerprints instead of keys (a store of
// format 1 or 2 is upgraded when opened, see upgrade.go).
const formatVersion = 3

// logFormat is the first byte of every log record.
const logFormat = 1

var (
	markerKey = append([]byte{tagMarker}, "dedup-exact"...)
	// upgradingKey is set with the marker of format 3 by an upgrade, to
	// the format it upgraded from, and deleted once no key of that format
	// is left at rest (see upgrade.go).
	upgradingKey  = append([]byte{tagMarker}, "dedup-exact-upgrading"...)
	checkpointKey = []byte{tagCheckpoint}
	floorKey      = []byte{tagFloor}
	seqKey        = []byte{tagSeq}
	truncatedKey  = []byte{tagTruncated}
	eraKey        = []byte{tagEra}
	secretKey     = []byte{tagSecret}
)

// recordKeyLen is the length of tagRecord|gen|fingerprint.
const recordKeyLen = 25

// recordsEnd is the upper bound (exclusive) of the record range.
var recordsEnd = []byte{tagRecord + 1}

// putRecordKey writes tagRecord|gen|fp into dst, recordKeyLen long.
func putRecordKey(dst []byte, gen uint64, fp Fingerprint) {
	dst[0] = tagRecord
	binary.BigEndian.PutUint64(dst[1:9], gen)
	copy(dst[9:], fp[:])
}

// keysEnd is the upper bound (exclusive) of the format-1 key range.
var keysEnd = []byte{tagKey + 1}

// flushKeysEnd is the upper bound (exclusive) of the flushed key range.
var flushKeysEnd = []byte{tagFlushKey + 1}

// filtersEnd is the upper bound (exclusive) of the filter range.
var filtersEnd = []byte{tagFilter + 1}

// tagGen returns tag|gen (gen as 8 big-endian bytes): the first key of
// gen's range under tag, or, under tagLog, the key of a log entry.
func tagGen(tag byte, gen uint64) []byte {
	b := make([]byte, 9)
	b[0] = tag
	binary.BigEndian.PutUint64(b[1:], gen)
	return b
}

// fpEnd and fpFiltersEnd are the upper bounds (exclusive) of the
// fingerprint and fingerprint-filter ranges.
var (
	fpEnd        = []byte{tagFP + 1}
	fpFiltersEnd = []byte{tagFPFilter + 1}
)

// fpKeyLen is the length of tagFP|gen|flush|fingerprint.
const fpKeyLen = 33

// putFPKey writes tagFP|gen|flush|fp into dst, fpKeyLen long.
func putFPKey(dst []byte, gen, flush uint64, fp *Fingerprint) {
	dst[0] = tagFP
	binary.BigEndian.PutUint64(dst[1:9], gen)
	binary.BigEndian.PutUint64(dst[9:17], flush)
	copy(dst[17:], fp[:])
}

// filterKey returns tagFPFilter|gen|flush.
func filterKey(gen, flush uint64) []byte {
	b := make([]byte, 17)
	b[0] = tagFPFilter
	binary.BigEndian.PutUint64(b[1:], gen)
	binary.BigEndian.PutUint64(b[9:], flush)
	return b
}

// logKey returns tagLog|seq.
func logKey(seq uint64) []byte { return tagGen(tagLog, seq) }

var logEnd = []byte{tagLog + 1}

func metaKey(name string) []byte {
	b := make([]byte, 1+len(name))
	b[0] = tagMeta
	copy(b[1:], name)
	return b
}

func be64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func decodeBE64(what string, v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: %s record is %d bytes, want 8", ErrCorrupt, what, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// run is a group of consecutive Adds of the same generation.
type run struct {
	gen uint64
	n   int
}

// logRecordSize is the exact encoded size of a log record.
func logRecordSize(runs []run) int {
	n := 1
	for _, r := range runs {
		n += uvarintLen(r.gen) + uvarintLen(uint64(r.n)) + 8*r.n
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// encodeLogRecord writes the record of runs/hashes into dst, which must be
// logRecordSize(runs) long.
func encodeLogRecord(dst []byte, runs []run, hashes []uint64) {
	dst[0] = logFormat
	p := 1
	h := 0
	for _, r := range runs {
		p += binary.PutUvarint(dst[p:], r.gen)
		p += binary.PutUvarint(dst[p:], uint64(r.n))
		for _, v := range hashes[h : h+r.n] {
			binary.LittleEndian.PutUint64(dst[p:], v)
			p += 8
		}
		h += r.n
	}
}

// decodeLogRecord calls fn for every (gen, hash) of rec with gen >= floor.
func decodeLogRecord(seq uint64, rec []byte, floor uint64, fn func(seq, gen, hash uint64) error) error {
	if len(rec) < 1 || rec[0] != logFormat {
		return fmt.Errorf("%w: log record %d: bad format byte", ErrCorrupt, seq)
	}
	p := 1
	for p < len(rec) {
		gen, n1 := binary.Uvarint(rec[p:])
		if n1 <= 0 {
			return fmt.Errorf("%w: log record %d: bad generation at byte %d", ErrCorrupt, seq, p)
		}
		p += n1
		cnt, n2 := binary.Uvarint(rec[p:])
		if n2 <= 0 || cnt > uint64(len(rec)-p-n2)/8 {
			return fmt.Errorf("%w: log record %d: bad count at byte %d", ErrCorrupt, seq, p)
		}
		p += n2
		if gen < floor {
			p += int(cnt) * 8
			continue
		}
		for i := uint64(0); i < cnt; i++ {
			if err := fn(seq, gen, binary.LittleEndian.Uint64(rec[p:])); err != nil {
				return err
			}
			p += 8
		}
	}
	return nil
}
