package exact

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The commit log: every Commit appends one record to the current segment
// file and fsyncs it, and nothing else is written on the commit path. A
// segment holds the commits of one memtable; once that memtable is in
// Pebble (see flush.go), the segment is retired: kept for reuse by a later
// segment, which overwrites it from the start. An fsync that only
// overwrites allocated blocks changes no file-system metadata, so it needs
// no journal commit, which would also wait for the writeback of the
// sstables being flushed: measured 1.6-5x faster on this machine's ext4
// (Pebble recycles its WAL files for the same reason).
//
// A record is a 12-byte header, the payload length (uint32) and the
// xxhash64 of the payload (uint64), both little-endian, then the payload:
//
//	seq      8 bytes, little-endian (0 for the end marker)
//	segment  8 bytes, little-endian: the number of the segment written to
//	         (era<<32 | count: never given twice, see Store.newEra)
//	flags    1 byte: recCheckpoint, recDrop, recEnd, recRecords, recFPs,
//	         recHashes (recKeys in format 2 only)
//	[uvarint len, checkpoint]   if recCheckpoint
//	[uvarint drop]              if recDrop
//	uvarint runs, then per run: uvarint gen, uvarint n, and n entries of
//	    fixed size:
//	      fingerprint (16 bytes)                        if recFPs alone: the
//	                                                    hash is FingerprintHash
//	      hash (8 bytes, little-endian), fingerprint    if recFPs|recHashes
//	      hash (8 bytes, little-endian)                 with neither (LogOnly)
//	    (format 2 wrote hash, uvarint len, key with recKeys; replay still
//	    reads it, turning each key into its fingerprint)
//	[uvarint count, then per result record: uvarint gen, fingerprint
//	    (16 bytes), kind (1 byte: 0 delete, 1 put), [uvarint len, value
//	    if put]]                if recRecords
//
// Records follow seq order within and across segments. A segment that
// commits move on from ends with an end marker, and is fsynced whole
// before the first fsync of the next one, so an acknowledged record never
// follows a lost one: replay stops at the first record that is torn, fails
// its checksum or was written to an earlier use of the file (a write that
// no Commit returned for), and ignores everything after it. Only an end
// marker leads on to the next segment.

// segPrefix names the commit log's segment files: segPrefix + number.
// A retired segment waiting for reuse is renamed freePrefix + number, out
// of the replay's way.
const (
	segPrefix  = "exact-commits-"
	freePrefix = "exact-commits-free-"
)

// maxRecycled is the number of retired segments kept for reuse.
const maxRecycled = 1

const recHeader = 12

// Record flags.
const (
	recCheckpoint = 1 << iota
	recDrop
	recKeys
	recEnd
	recRecords
	recFPs
	recHashes
)

// recFixed is the size of the payload's fixed part: seq, segment, flags.
const recFixed = 17

// maxRecord bounds a record's payload (its length is a uint32).
const maxRecord = 1<<32 - 1

func segName(num uint64) string  { return fmt.Sprintf("%s%06d", segPrefix, num) }
func freeName(num uint64) string { return fmt.Sprintf("%s%06d", freePrefix, num) }

// parseSegName returns the number of a segment file name.
func parseSegName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, segPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// parseFreeName returns the number of a retired segment's file name.
func parseFreeName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, freePrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// segment is one file of the commit log.
type segment struct {
	num  uint64
	path string
	dir  string
	fs   vfs.FS
	f    vfs.File

	// written counts the bytes appended (appends run under Store.logMu).
	written atomic.Int64
	// base is the size the file had before this use (reused files).
	base int64
	// chunk is the size of the chunks of zeros the file grows by (see
	// zeroAhead), 0 for none; zeroed is the end of the zeros written,
	// under Store.logMu, as noZeros, set once a write of zeros failed.
	chunk   int64
	zeroed  atomic.Int64
	noZeros bool
	// synced counts the bytes known to be durable.
	synced atomic.Int64

	// mu serialises fsyncs: a commit that finds its bytes synced by
	// another's fsync does not fsync again (group commit).
	mu sync.Mutex
	// prev is the segment before this one, fsynced whole before this one's
	// first fsync; nil once it was.
	prev *segment
	// dirSynced is set once the directory entry of the file is durable.
	dirSynced bool
}

// createSegment creates segment num in dir, reusing the file at path reuse
// (a retired segment, renamed) unless reuse is "", growing by chunks of
// zeros of chunk bytes (0: none; none either for a file that is not the
// operating system's, in memory). The directory entry is made durable
// before the segment's first fsync completes.
func createSegment(fs vfs.FS, dir string, num uint64, prev *segment, reuse string, chunk int64) (*segment, error) {
	path := fs.PathJoin(dir, segName(num))
	var f vfs.File
	var base int64
	var err error
	if reuse != "" {
		if fi, serr := fs.Stat(reuse); serr == nil {
			base = fi.Size()
		}
		f, err = fs.ReuseForWrite(reuse, path, vfs.WriteCategoryUnspecified)
	} else {
		f, err = fs.Create(path, vfs.WriteCategoryUnspecified)
	}
	if err != nil {
		return nil, fmt.Errorf("exact: create commit log %q: %w", path, err)
	}
	if f.Fd() == vfs.InvalidFd {
		chunk = 0 // no journal to spare, and a memory file grows byte by byte
	}
	return &segment{num: num, path: path, dir: dir, fs: fs, f: f, prev: prev, base: base, chunk: min(chunk, int64(len(zeros)))}, nil
}

// maxZeroChunk is the largest chunk of zeros a segment's file grows by,
// ahead of its records (segChunk sizes it to the memtable). An fsync of
// records written into blocks that an earlier fsync made durable changes
// no file-system metadata (as in a reused segment); appending records
// would grow the file and make every fsync a journal commit: measured
// 1.5-2x the time and 1.3-1.7x the CPU of an overwrite on this machine's
// ext4. So a file is grown a chunk at a time, half a chunk before the
// records reach its end: one fsync per chunk carries the zeros and the new
// size, the others overwrite. Replay stops at the zeros (a record header
// of length 0 is torn).
const maxZeroChunk = 1 << 20

// zeros is what a segment is extended with.
var zeros = make([]byte, maxZeroChunk)

// segChunk is the chunk of zeros of the segments of a store whose
// memtables flush at memLimit bytes: a quarter of that (a segment's records
// take about as many bytes as its memtable), between 4 KiB and
// maxZeroChunk, so that small memtables do not write a MiB per segment.
func segChunk(memLimit int) int64 {
	return min(max(int64(memLimit)/4, 4<<10), maxZeroChunk)
}

// append writes rec after the segment's records and returns the offset
// just past it and the growth of the file. The caller holds Store.logMu.
func (g *segment) append(rec []byte) (end, grown int64, err error) {
	size0 := g.size()
	off := g.written.Load()
	g.zeroAhead(off + int64(len(rec)))
	if _, err := g.f.WriteAt(rec, off); err != nil {
		return 0, 0, fmt.Errorf("exact: write commit log %q: %w", g.path, err)
	}
	end = g.written.Add(int64(len(rec)))
	return end, g.size() - size0, nil
}

// zeroAhead extends the file with zeros so that it reaches at least half a
// chunk past end, the end of the records about to be written. The zeros
// only make fsyncs cheaper: once a write of them fails (a disk with less
// than a chunk free), the segment appends its records without them, and
// only a failed write of a record fails a commit.
func (g *segment) zeroAhead(end int64) {
	c := g.chunk
	from := max(g.base, g.zeroed.Load())
	if c == 0 || g.noZeros || end+c/2 <= from {
		return
	}
	from = max(from, g.written.Load())
	to := (end + c/2 + c - 1) / c * c
	for off := from; off < to; {
		n, err := g.f.WriteAt(zeros[:min(int64(len(zeros)), to-off)], off)
		off += int64(n)
		g.zeroed.Store(max(g.zeroed.Load(), off))
		if err != nil {
			g.noZeros = true
			return
		}
	}
}

// size is the size of the segment's file.
func (g *segment) size() int64 { return max(g.base, g.zeroed.Load(), g.written.Load()) }

// syncThrough makes the bytes before off durable, and every earlier
// segment with them.
func (g *segment) syncThrough(off int64) error {
	if g.synced.Load() >= off {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.synced.Load() >= off {
		return nil
	}
	if g.prev != nil {
		if err := g.prev.syncAll(); err != nil {
			return err
		}
		g.prev = nil
	}
	if !g.dirSynced {
		if err := syncDir(g.fs, g.dir); err != nil {
			return err
		}
		g.dirSynced = true
	}
	target := g.written.Load()
	if err := g.f.SyncData(); err != nil {
		return fmt.Errorf("exact: sync commit log %q: %w", g.path, err)
	}
	g.synced.Store(target)
	return nil
}

// syncAll makes the whole segment durable.
func (g *segment) syncAll() error { return g.syncThrough(g.written.Load()) }

// syncDir makes the entries of dir durable.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("exact: open directory %q: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("exact: sync directory %q: %w", dir, err)
	}
	return nil
}

// encodeRecord appends the record of batch b (header included, seq zero:
// see stampRecord) to dst.
func encodeRecord(dst []byte, b *Batch) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recHeader+recFixed)...)
	var flags byte
	if b.hasCP {
		flags |= recCheckpoint
		dst = binary.AppendUvarint(dst, uint64(len(b.cp)))
		dst = append(dst, b.cp...)
	}
	if b.drop > 0 {
		flags |= recDrop
		dst = binary.AppendUvarint(dst, b.drop)
	}
	fps := len(b.ents) > 0
	hashed := false
	if fps {
		flags |= recFPs
		for i := range b.ents {
			if b.hashes[i] != FingerprintHash(&b.ents[i].fp) {
				hashed = true
				flags |= recHashes
				break
			}
		}
	}
	if len(b.recs) > 0 {
		flags |= recRecords
	}
	dst[start+recHeader+16] = flags
	dst = binary.AppendUvarint(dst, uint64(len(b.runs)))
	i := 0
	for _, r := range b.runs {
		dst = binary.AppendUvarint(dst, r.gen)
		dst = binary.AppendUvarint(dst, uint64(r.n))
		switch {
		case !fps:
			for _, h := range b.hashes[i : i+r.n] {
				dst = binary.LittleEndian.AppendUint64(dst, h)
			}
		case hashed:
			for j := i; j < i+r.n; j++ {
				dst = binary.LittleEndian.AppendUint64(dst, b.hashes[j])
				dst = append(dst, b.ents[j].fp[:]...)
			}
		default:
			for j := i; j < i+r.n; j++ {
				dst = append(dst, b.ents[j].fp[:]...)
			}
		}
		i += r.n
	}
	if len(b.recs) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(b.recs)))
		for i := range b.recs {
			op := &b.recs[i]
			dst = binary.AppendUvarint(dst, op.gen)
			dst = append(dst, op.fp[:]...)
			if op.del {
				dst = append(dst, recordDelete)
				continue
			}
			dst = append(dst, recordPut)
			dst = binary.AppendUvarint(dst, uint64(op.n))
			dst = append(dst, b.recVal(op)...)
		}
	}
	return dst
}

// Kinds of a result-record operation in a commit-log record.
const (
	recordDelete = 0
	recordPut    = 1
)

// logRecOp is a result-record operation decoded from the commit log; val
// points into the payload.
type logRecOp struct {
	gen uint64
	fp  Fingerprint
	val []byte
	del bool
}

// stampRecord sets the seq and segment of an encoded record and fills its
// header: the body's length and its xxhash64 checksum. The record is then
// ready to append to segment seg.
func stampRecord(rec []byte, seq, seg uint64) {
	p := rec[recHeader:]
	binary.LittleEndian.PutUint64(p, seq)
	binary.LittleEndian.PutUint64(p[8:], seg)
	binary.LittleEndian.PutUint32(rec, uint32(len(p)))
	binary.LittleEndian.PutUint64(rec[4:], xxhash.Sum64(p))
}

// endRecord returns the end marker of segment seg.
func endRecord(seg uint64) []byte {
	rec := make([]byte, recHeader+recFixed)
	rec[recHeader+16] = recEnd
	stampRecord(rec, 0, seg)
	return rec
}

// errTorn ends a replay: the end of the log, after which nothing was
// acknowledged.
var errTorn = errors.New("exact: end of the commit log")

// tornAt is errTorn at byte off of a segment: where its intact records end.
type tornAt struct{ off int64 }

func (t *tornAt) Error() string        { return fmt.Sprintf("%v at byte %d", errTorn, t.off) }
func (t *tornAt) Is(target error) bool { return target == errTorn }

// readLogEntries calls fn for every log entry of the file f, of size bytes, of
// segment seg, in order, and returns nil at its end marker. It returns
// errTorn at the end of the file or at a record that is short, fails its
// checksum or belongs to another segment (an earlier use of the file). The
// record passed to fn is valid only during the call.
func readLogEntries(f io.Reader, size int64, seg uint64, fn func(*logEntry) error) error {
	br := bufio.NewReaderSize(f, 1<<20)
	var off int64
	var hdr [recHeader]byte
	var payload []byte
	var r logEntry
	for {
		torn := &tornAt{off: off}
		if _, err := io.ReadFull(br, hdr[:]); err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			return torn
		} else if err != nil {
			return fmt.Errorf("exact: read commit log: %w", err)
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		sum := binary.LittleEndian.Uint64(hdr[4:])
		off += recHeader
		// A torn header may claim anything: never allocate past the file.
		if n < recFixed || int64(n) > size-off {
			return torn
		}
		off += int64(n)
		payload = slices.Grow(payload[:0], int(n))[:n]
		if _, err := io.ReadFull(br, payload); errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return torn
		} else if err != nil {
			return fmt.Errorf("exact: read commit log: %w", err)
		}
		if xxhash.Sum64(payload) != sum || binary.LittleEndian.Uint64(payload[8:]) != seg {
			return torn
		}
		if err := decodeLogEntry(payload, &r); err != nil {
			return err
		}
		if r.end {
			return nil
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
}
