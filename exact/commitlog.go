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
// Pebble (see flush.go), the segment is removed.
//
// A record is a 12-byte header, the payload length (uint32) and the
// xxhash64 of the payload (uint64), both little-endian, then the payload:
//
//	seq      8 bytes, little-endian
//	flags    1 byte: recCheckpoint, recDrop, recKeys
//	[uvarint len, checkpoint]   if recCheckpoint
//	[uvarint drop]              if recDrop
//	uvarint runs, then per run: uvarint gen, uvarint n, and n entries of
//	    hash (8 bytes, little-endian) [uvarint len, key if recKeys]
//
// Records follow seq order within and across segments. A segment is
// fsynced whole before the first fsync of the next one, so an
// acknowledged record never follows a lost one: replay stops at the first
// record that is torn or fails its checksum (a write that no Commit
// returned for) and ignores everything after it.

// segPrefix names the commit log's segment files: segPrefix + number.
const segPrefix = "exact-commits-"

const recHeader = 12

// Record flags.
const (
	recCheckpoint = 1 << iota
	recDrop
	recKeys
)

// maxRecord bounds a record's payload (its length is a uint32).
const maxRecord = 1<<32 - 1

func segName(num uint64) string { return fmt.Sprintf("%s%06d", segPrefix, num) }

// parseSegName returns the number of a segment file name.
func parseSegName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, segPrefix)
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

// createSegment creates segment num in dir. The directory entry is made
// durable before the segment's first fsync completes.
func createSegment(fs vfs.FS, dir string, num uint64, prev *segment) (*segment, error) {
	path := fs.PathJoin(dir, segName(num))
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("exact: create commit log %q: %w", path, err)
	}
	return &segment{num: num, path: path, dir: dir, fs: fs, f: f, prev: prev}, nil
}

// append writes rec at the end of the segment and returns the offset just
// past it. The caller holds Store.logMu.
func (g *segment) append(rec []byte) (int64, error) {
	if _, err := g.f.Write(rec); err != nil {
		return 0, fmt.Errorf("exact: write commit log %q: %w", g.path, err)
	}
	return g.written.Add(int64(len(rec))), nil
}

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
// see sealRecord) to dst.
func encodeRecord(dst []byte, b *Batch) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recHeader+8+1)...)
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
	keys := len(b.ents) > 0
	if keys {
		flags |= recKeys
	}
	dst[start+recHeader+8] = flags
	dst = binary.AppendUvarint(dst, uint64(len(b.runs)))
	i := 0
	for _, r := range b.runs {
		dst = binary.AppendUvarint(dst, r.gen)
		dst = binary.AppendUvarint(dst, uint64(r.n))
		for _, h := range b.hashes[i : i+r.n] {
			dst = binary.LittleEndian.AppendUint64(dst, h)
			if keys {
				k := b.key(&b.ents[i])
				dst = binary.AppendUvarint(dst, uint64(len(k)))
				dst = append(dst, k...)
			}
			i++
		}
	}
	return dst
}

// sealRecord sets the seq of an encoded record and fills its header.
func sealRecord(rec []byte, seq uint64) {
	p := rec[recHeader:]
	binary.LittleEndian.PutUint64(p, seq)
	binary.LittleEndian.PutUint32(rec, uint32(len(p)))
	binary.LittleEndian.PutUint64(rec[4:], xxhash.Sum64(p))
}

// record is a decoded commit-log record. Its slices point into the
// payload it was decoded from.
type record struct {
	seq    uint64
	cp     []byte
	hasCP  bool
	drop   uint64
	runs   []run
	hashes []uint64
	keys   [][]byte // nil if the record holds no keys
}

// decodeRecord decodes a payload whose checksum matched.
func decodeRecord(p []byte, r *record) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: commit log record: bad %s", ErrCorrupt, what)
	}
	if len(p) < 9 {
		return bad("length")
	}
	r.seq = binary.LittleEndian.Uint64(p)
	flags := p[8]
	p = p[9:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	r.cp, r.hasCP, r.drop = nil, false, 0
	r.runs, r.hashes, r.keys = r.runs[:0], r.hashes[:0], r.keys[:0]
	if flags&recCheckpoint != 0 {
		n, ok := uv()
		if !ok || n > uint64(len(p)) {
			return bad("checkpoint")
		}
		r.cp, r.hasCP, p = p[:n], true, p[n:]
	}
	if flags&recDrop != 0 {
		var ok bool
		if r.drop, ok = uv(); !ok {
			return bad("drop")
		}
	}
	keys := flags&recKeys != 0
	nruns, ok := uv()
	if !ok || nruns > uint64(len(p)) {
		return bad("run count")
	}
	for range nruns {
		gen, ok1 := uv()
		n, ok2 := uv()
		if !ok1 || !ok2 || n > uint64(len(p))/8 {
			return bad("run")
		}
		r.runs = append(r.runs, run{gen: gen, n: int(n)})
		for range n {
			if len(p) < 8 {
				return bad("hash")
			}
			r.hashes = append(r.hashes, binary.LittleEndian.Uint64(p))
			p = p[8:]
			if keys {
				kl, ok := uv()
				if !ok || kl == 0 || kl > MaxKeySize || kl > uint64(len(p)) {
					return bad("key")
				}
				r.keys = append(r.keys, p[:kl])
				p = p[kl:]
			}
		}
	}
	if !keys {
		r.keys = nil
	}
	if len(p) != 0 {
		return bad("trailing bytes")
	}
	return nil
}

// errTorn ends a replay: a torn or unsynced record, after which nothing was
// acknowledged.
var errTorn = errors.New("exact: torn commit log record")

// readRecords calls fn for every record of segment file f, in order. It
// returns errTorn at a record that is short or fails its checksum. The
// record passed to fn is valid only during the call.
func readRecords(f io.Reader, fn func(*record) error) error {
	br := bufio.NewReaderSize(f, 1<<20)
	var hdr [recHeader]byte
	var payload []byte
	var r record
	for {
		if _, err := io.ReadFull(br, hdr[:]); err == io.EOF {
			return nil
		} else if errors.Is(err, io.ErrUnexpectedEOF) {
			return errTorn
		} else if err != nil {
			return fmt.Errorf("exact: read commit log: %w", err)
		}
		n := binary.LittleEndian.Uint32(hdr[:])
		sum := binary.LittleEndian.Uint64(hdr[4:])
		if n < 9 {
			return errTorn
		}
		payload = slices.Grow(payload[:0], int(n))[:n]
		if _, err := io.ReadFull(br, payload); errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return errTorn
		} else if err != nil {
			return fmt.Errorf("exact: read commit log: %w", err)
		}
		if xxhash.Sum64(payload) != sum {
			return errTorn
		}
		if err := decodeRecord(payload, &r); err != nil {
			return err
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
}
