package dedup

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/filter"
	"github.com/streamdedup/dedup/rotate"
)

// SpoolDir is the folder of the state directory that holds, with Filter
// "fuse", the hashes of each shard's newest generation until it is sealed
// into a static filter. Nothing in it is read after a restart: Open empties
// it.
const SpoolDir = "spool"

// fuseSpools gives a Fuse ring config its spools: files under
// dir/SpoolDir when the engine has a state directory (persistent), so that
// the newest generation's hashes take disk (8 bytes each) instead of
// memory; none otherwise (the ring keeps them in memory). The folder is
// emptied first: a spool of an earlier run is never read (a generation
// restored from a snapshot keeps its blocked filter until it expires, one
// rebuilt from the log or the store spools its hashes again). A spool that
// cannot be made, written or read back (a full disk) leaves its generation
// unsealed, and logf says so once a generation.
func fuseSpools(cfg *rotate.Options, fs vfs.FS, dir string, persistent bool, logf func(string, ...any)) error {
	if cfg.Kind != filter.Fuse || !persistent {
		return nil
	}
	sdir := fs.PathJoin(dir, SpoolDir)
	if err := fs.MkdirAll(sdir, 0o755); err != nil {
		return wrap(err, "spool folder")
	}
	names, err := fs.List(sdir)
	if err != nil {
		return wrap(err, "spool folder")
	}
	for _, n := range names {
		if err := fs.Remove(fs.PathJoin(sdir, n)); err != nil {
			return wrap(err, "spool folder: remove %s", n)
		}
	}
	var seq atomic.Uint64
	var logged atomic.Uint64 // 1 + the generation last reported
	report := func(id uint64, err error) {
		if logged.Swap(id+1) != id+1 {
			logf("dedup: fuse spool of generation %d: %v: a shard whose spool failed keeps the generation's blocked filter (more memory, no key lost)", id, err)
		}
	}
	cfg.NewSpool = func(id uint64) (rotate.Spool, error) {
		path := fs.PathJoin(sdir, fmt.Sprintf("%d-%d.hashes", id, seq.Add(1)))
		f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			report(id, err)
			return nil, err
		}
		return &fileSpool{fs: fs, path: path, f: f, buf: make([]byte, 0, spoolBuffer), id: id, report: report}, nil
	}
	return nil
}

// spoolBuffer is the write buffer of a file spool.
const spoolBuffer = 16 << 10

// fileSpool is a rotate.Spool in a file: hashes appended little-endian
// through a buffer. It is never synced: a crash loses it, and nothing
// reads it after one.
type fileSpool struct {
	fs   vfs.FS
	path string
	f    vfs.File
	buf  []byte
	n    uint64 // hashes written to f
	// id is the generation spooled; report logs a failure.
	id     uint64
	report func(id uint64, err error)
}

// Append implements rotate.Spool.
func (s *fileSpool) Append(h uint64) error {
	s.buf = binary.LittleEndian.AppendUint64(s.buf, h)
	if len(s.buf) == cap(s.buf) {
		if err := s.flush(); err != nil {
			s.report(s.id, err)
			return err
		}
	}
	return nil
}

func (s *fileSpool) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	if _, err := s.f.Write(s.buf); err != nil {
		return err
	}
	s.n += uint64(len(s.buf) / 8)
	s.buf = s.buf[:0]
	return nil
}

// Hashes implements rotate.Spool: the file read back whole.
func (s *fileSpool) Hashes() ([]uint64, error) {
	hs, err := s.hashes()
	if err != nil {
		s.report(s.id, err)
	}
	return hs, err
}

func (s *fileSpool) hashes() ([]uint64, error) {
	if err := s.flush(); err != nil {
		return nil, err
	}
	hs := make([]uint64, s.n)
	b := make([]byte, min(spoolBuffer, 8*s.n))
	for off := uint64(0); off < 8*s.n; {
		m := min(uint64(len(b)), 8*s.n-off)
		if _, err := s.f.ReadAt(b[:m], int64(off)); err != nil && err != io.EOF {
			return nil, err
		}
		for i := uint64(0); i < m; i += 8 {
			hs[(off+i)/8] = binary.LittleEndian.Uint64(b[i:])
		}
		off += m
	}
	return hs, nil
}

// MemoryBytes implements rotate.Spool: the buffer.
func (s *fileSpool) MemoryBytes() uint64 { return uint64(cap(s.buf)) }

// Close implements rotate.Spool: the file is removed.
func (s *fileSpool) Close() error {
	err := s.f.Close()
	if rerr := s.fs.Remove(s.path); err == nil {
		err = rerr
	}
	return err
}

// kindFits reports whether a restored filter of kind got may serve a ring
// of kind want: a Fuse ring holds blocked filters (its newest generation,
// or one that could not be sealed) besides fuse ones.
func kindFits(want, got filter.Kind) bool {
	return got == want || want == filter.Fuse && got == filter.Blocked
}
