package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/filter"
)

// Header is what shapes the filters, and where the snapshot stands in the
// commit stream.
type Header struct {
	// Version is the format version: Write ignores it and writes Version;
	// Read reports the version it read.
	Version uint32
	// Seed is the state directory's hash seed.
	Seed uint64
	// Options are the engine-encoded shaping options (window, generations,
	// shards, filter kind, false-positive rate...), opaque to this package.
	// At most MaxOptionsSize bytes.
	Options []byte
	// CommitSeq places the snapshot in the commit stream: every commit with
	// seq <= CommitSeq is in the filters.
	CommitSeq uint64
	// Created is the snapshot time in unix nanoseconds, from the caller's
	// clock.
	Created int64
}

// Generation is one filter of one shard's generation, as given to Write.
type Generation struct {
	ID         uint64      // generation number
	Shard      uint32      // shard index
	Start, End int64       // span, unix nanoseconds
	Count      uint64      // keys held
	Kind       filter.Kind // filter backend of the payload
	// Final promises that this filter will never change again: Write may
	// then reuse the segment the previous snapshot holds for the same
	// (ID, Shard) with the same metadata (Final included) instead of
	// writing it again, so the first snapshot after it becomes final still
	// writes it. A Final generation's metadata and payload must be
	// identical in every later Write.
	Final bool
	// Payload produces the filter bytes. Write calls it at most once, and
	// not at all when it reuses a final segment. Write may modify the
	// returned slice (vfs.File.Write may) and does not keep it.
	Payload func() ([]byte, error)
}

// SegmentInfo describes one segment of a snapshot.
type SegmentInfo struct {
	ID         uint64      // generation number
	Shard      uint32      // shard index
	Start, End int64       // span, unix nanoseconds
	Count      uint64      // keys held
	Kind       filter.Kind // filter backend of the payload
	Final      bool        // the generation was final when written
	Name       string      // segment file name, in the snapshot's directory
	Size       int64       // segment file size in bytes (payload + 86)
	Checksum   uint64      // xxhash64 of the segment file (its trailer)
	// Reused is set by Write when the segment was taken over from the
	// previous snapshot rather than written.
	Reused bool
}

// PayloadSize is the size of the filter payload the segment holds.
func (s SegmentInfo) PayloadSize() int64 { return s.Size - segOverhead }

// GenerationInfo is one generation of a snapshot read back, with its payload.
type GenerationInfo struct {
	SegmentInfo
	// Payload is the filter bytes, as returned by Generation.Payload at
	// write time. The caller owns it.
	Payload []byte
}

// Snapshot is a snapshot read back and fully verified.
type Snapshot struct {
	// Path is the manifest's path.
	Path string
	// Header is the snapshot's header; Header.Version the version read.
	Header Header
	// Generations are in the order given to Write.
	Generations []GenerationInfo
	// Skipped lists, newest first, the newer snapshots Latest passed over
	// because they were corrupt; every entry wraps ErrCorrupt. The engine
	// should report them.
	Skipped []error
}

// Info summarises a snapshot, as written by Write or found by Inspect.
type Info struct {
	Path      string // the manifest's path
	Version   uint32 // format version
	Seed      uint64 // hash seed
	CommitSeq uint64 // commit sequence number covered
	Created   int64  // unix nanoseconds
	Options   []byte // opaque shaping options
	Segments  []SegmentInfo
	// ManifestSize is the size of the manifest file, TotalSize that plus the
	// size of every segment.
	ManifestSize, TotalSize int64

	// Written is the number of bytes this Write wrote (new segments and the
	// manifest), Reused the number of segments it took over. Write only.
	Written int64
	Reused  int
	// CleanupErr reports a failure to delete files no longer needed, after
	// the new snapshot was durably in place (Write returns a nil error then).
	// The next Write retries. Write only.
	CleanupErr error
}

func (r ref) info() SegmentInfo {
	return SegmentInfo{
		ID: r.ID, Shard: r.Shard, Start: r.Start, End: r.End, Count: r.Count,
		Kind: r.Kind, Final: r.Final, Name: r.Name, Size: r.Size, Checksum: r.Sum,
	}
}

func (m manifest) info(path string, size int64) Info {
	info := Info{
		Path: path, Version: m.Header.Version, Seed: m.Header.Seed,
		CommitSeq: m.Header.CommitSeq, Created: m.Header.Created,
		Options: m.Header.Options, ManifestSize: size, TotalSize: size,
	}
	for _, r := range m.Refs {
		info.Segments = append(info.Segments, r.info())
		info.TotalSize += r.Size
	}
	return info
}

// Write writes a new snapshot of h and gens into dir (created if missing) and
// makes it the latest, atomically: a crash or an error at any point leaves
// the previous snapshot intact, and Latest then returns either it or the new
// one. Final generations whose segment the previous snapshot holds are not
// written again. Once the new snapshot is durable, Write deletes every file
// but it, the previous snapshot, and the segments these two reference.
//
// At most one Write may run on a directory at a time, and Latest must not
// run concurrently with it.
func Write(fs vfs.FS, dir string, h Header, gens []Generation) (Info, error) {
	return write(fs, dir, h, gens, "", false)
}

// WriteAfter is Write for a caller that knows which snapshot of dir is
// good: prev, the file name of its manifest (one Latest returned, or the
// last Write wrote), is kept as the fallback and its final segments are
// reused, instead of those of the newest manifest that decodes, which may
// be damaged; every other snapshot is removed. An empty prev, or one that
// does not decode, keeps and reuses none.
func WriteAfter(fs vfs.FS, dir, prev string, h Header, gens []Generation) (Info, error) {
	return write(fs, dir, h, gens, prev, true)
}

func write(fs vfs.FS, dir string, h Header, gens []Generation, known string, useKnown bool) (Info, error) {
	if len(h.Options) > MaxOptionsSize {
		return Info{}, fmt.Errorf("snapshot: write: options of %d bytes, over the limit %d", len(h.Options), MaxOptionsSize)
	}
	if len(gens) > MaxSegments {
		return Info{}, fmt.Errorf("snapshot: write: %d generations, over the limit %d", len(gens), MaxSegments)
	}
	seen := make(map[[2]uint64]bool, len(gens))
	for _, g := range gens {
		k := [2]uint64{g.ID, uint64(g.Shard)}
		if seen[k] {
			return Info{}, fmt.Errorf("snapshot: write: generation %d shard %d given twice", g.ID, g.Shard)
		}
		seen[k] = true
		if g.Payload == nil {
			return Info{}, fmt.Errorf("snapshot: write: generation %d shard %d has no Payload func", g.ID, g.Shard)
		}
	}
	if err := ensureDir(fs, dir); err != nil {
		return Info{}, err
	}
	st, err := scan(fs, dir)
	if err != nil {
		return Info{}, err
	}
	var prev *manifest
	var prevName string
	if !useKnown {
		prev, prevName, err = newestManifest(fs, dir, st.manifests)
		if err != nil {
			return Info{}, err
		}
	} else if known != "" {
		if m, _, err := readManifest(fs, fs.PathJoin(dir, known)); err == nil {
			prev, prevName = &m, known
		}
	}
	prevRefs := make(map[[2]uint64]ref)
	// A segment hashes keys with its header's seed, under its options: one
	// written under others holds other hashes, whatever its metadata.
	if prev != nil && prev.Header.Seed == h.Seed && bytes.Equal(prev.Header.Options, h.Options) {
		for _, r := range prev.Refs {
			prevRefs[[2]uint64{r.ID, uint64(r.Shard)}] = r
		}
	}

	h.Version = Version
	seq := st.maxSeq + 1
	w := &writer{fs: fs, dir: dir}
	refs := make([]ref, len(gens))
	reused := make([]bool, len(gens))
	var todo []int // the generations to write
	for i, g := range gens {
		m := meta{ID: g.ID, Shard: g.Shard, Start: g.Start, End: g.End, Count: g.Count, Kind: g.Kind, Final: g.Final}
		if r, ok := prevRefs[[2]uint64{g.ID, uint64(g.Shard)}]; ok && g.Final && r.meta == m && segmentIntact(fs, dir, r) {
			refs[i], reused[i] = r, true
			continue
		}
		refs[i].meta = m
		todo = append(todo, i)
	}
	// A few segments are written at once, so that one's encoding, write
	// and fsync overlap the others' instead of following them.
	errs := make([]error, len(todo))
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(writeWorkers, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := int(next.Add(1) - 1); j < len(todo) && !failed.Load(); j = int(next.Add(1) - 1) {
				i := todo[j]
				if errs[j] = w.writeSegment(seq, gens[i], &refs[i]); errs[j] != nil {
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Info{}, w.abort(err)
		}
	}
	if len(w.renamed) > 0 {
		if err := syncDir(fs, dir); err != nil {
			return Info{}, w.abort(err)
		}
	}

	mb := encodeManifest(h, refs)
	if len(mb) > MaxManifestSize {
		return Info{}, w.abort(fmt.Errorf("snapshot: write: manifest of %d bytes, over the limit %d", len(mb), MaxManifestSize))
	}
	name := manifestName(seq)
	msize := int64(len(mb))
	if _, err := w.writeFile(name, mb); err != nil {
		return Info{}, w.abort(err)
	}
	if err := syncDir(fs, dir); err != nil {
		// Not known to be durable: take it back, so the caller's view (the
		// write failed) and Latest's agree.
		return Info{}, w.abort(err)
	}

	info := manifest{Header: h, Refs: refs}.info(fs.PathJoin(dir, name), msize)
	info.Written = w.written
	for i, r := range reused {
		if r {
			info.Segments[i].Reused = true
			info.Reused++
		}
	}
	keep := map[string]bool{name: true}
	live := make(map[string]bool)
	for _, r := range refs {
		live[r.Name] = true
	}
	if prev != nil {
		keep[prevName] = true
		for _, r := range prev.Refs {
			live[r.Name] = true
		}
	}
	info.CleanupErr = cleanup(fs, dir, keep, live)
	return info, nil
}

// writeWorkers is the number of segments Write writes at once.
const writeWorkers = 4

// writer writes the files of one Write and takes them back on failure.
// writeFile and writeSegment are safe for concurrent use.
type writer struct {
	fs      vfs.FS
	dir     string
	mu      sync.Mutex
	renamed []string // files renamed into place by this Write
	written int64
}

// writeSegment writes generation g's segment and completes r, whose meta
// is set.
func (w *writer) writeSegment(seq uint64, g Generation, r *ref) error {
	payload, err := g.Payload()
	if err != nil {
		return fmt.Errorf("snapshot: write: payload of generation %d shard %d: %w", g.ID, g.Shard, err)
	}
	name := segmentName(seq, g.ID, g.Shard)
	head := segmentHead(r.meta, len(payload))
	// The tail and the sum are taken before any Write, which may modify
	// its input (Pebble's MemFS does, in invariants builds).
	tail := segmentTail(head, payload)
	sum := binary.LittleEndian.Uint64(tail[8:])
	size, err := w.writeFile(name, head, payload, tail)
	if err != nil {
		return err
	}
	r.Name, r.Size, r.Sum = name, size, sum
	return nil
}

// writeFile writes parts to name.tmp, syncs it, and renames it to name.
func (w *writer) writeFile(name string, parts ...[]byte) (size int64, err error) {
	tmp := w.fs.PathJoin(w.dir, name+tmpSuffix)
	f, err := w.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return 0, fmt.Errorf("snapshot: create %s: %w", tmp, err)
	}
	defer func() {
		if f != nil {
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			if rerr := w.fs.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("snapshot: remove %s: %w", tmp, rerr))
			}
		}
	}()
	for _, p := range parts {
		n, err := f.Write(p)
		size += int64(n)
		if err != nil {
			return size, fmt.Errorf("snapshot: write %s: %w", tmp, err)
		}
	}
	if err := f.Sync(); err != nil {
		return size, fmt.Errorf("snapshot: sync %s: %w", tmp, err)
	}
	cerr := f.Close()
	f = nil
	if cerr != nil {
		return size, fmt.Errorf("snapshot: close %s: %w", tmp, cerr)
	}
	final := w.fs.PathJoin(w.dir, name)
	if err := w.fs.Rename(tmp, final); err != nil {
		return size, fmt.Errorf("snapshot: rename %s: %w", tmp, err)
	}
	w.mu.Lock()
	w.renamed = append(w.renamed, final)
	w.written += size
	w.mu.Unlock()
	return size, nil
}

// abort removes the files this Write put in place (none is referenced by a
// durable manifest) and returns err joined with any removal failure. The
// manifest, renamed last, is removed first.
func (w *writer) abort(err error) error {
	for i := len(w.renamed) - 1; i >= 0; i-- {
		if rerr := w.fs.Remove(w.renamed[i]); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("snapshot: remove %s: %w", w.renamed[i], rerr))
			if i == len(w.renamed)-1 {
				if _, ok := parseManifestName(w.fs.PathBase(w.renamed[i])); ok {
					// The manifest stays: so must its segments.
					return err
				}
			}
		}
	}
	if len(w.renamed) > 0 {
		// Make the removals durable, so that the sequence number the next
		// Write reuses names no file that could reappear after a crash.
		if serr := syncDir(w.fs, w.dir); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	return err
}

// segmentIntact cheaply checks that r's segment file is in place: its size,
// metadata and trailer. The payload checksum is verified by Read.
func segmentIntact(fs vfs.FS, dir string, r ref) bool {
	f, err := fs.Open(fs.PathJoin(dir, r.Name))
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() != r.Size {
		return false
	}
	var head [segHeadLen]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return false
	}
	m, err := decodeSegmentHead(head[:], r.Size)
	if err != nil || m != r.meta {
		return false
	}
	var tail [trailerLen]byte
	if _, err := f.ReadAt(tail[:], r.Size-trailerLen); err != nil {
		return false
	}
	return binary.LittleEndian.Uint64(tail[:]) == r.Sum
}

// ensureDir creates dir if it is missing, and makes every directory it
// creates durable by syncing its parent.
func ensureDir(fs vfs.FS, dir string) error {
	// created lists, innermost first, the missing directories.
	var created []string
	for d := dir; ; {
		_, err := fs.Stat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("snapshot: stat %s: %w", d, err)
		}
		created = append(created, d)
		parent := fs.PathDir(d)
		if parent == d || parent == "" || parent == "." {
			break
		}
		d = parent
	}
	if len(created) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("snapshot: mkdir %s: %w", dir, err)
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := syncDir(fs, fs.PathDir(created[i])); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) (err error) {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("snapshot: open directory %s: %w", dir, err)
	}
	defer func() {
		if cerr := d.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("snapshot: close directory %s: %w", dir, cerr))
		}
	}()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("snapshot: sync directory %s: %w", dir, err)
	}
	return nil
}

// dirState is what scan finds in a snapshot directory.
type dirState struct {
	manifests []uint64 // sequence numbers, newest first
	maxSeq    uint64   // highest sequence number of any snapshot file
}

// scan lists dir, sweeps temporary files, and collects snapshot files.
func scan(fs vfs.FS, dir string) (dirState, error) {
	var st dirState
	names, err := fs.List(dir)
	if err != nil {
		return st, fmt.Errorf("snapshot: list %s: %w", dir, err)
	}
	var errs []error
	for _, name := range names {
		base, isTmp := strings.CutSuffix(name, tmpSuffix)
		seq, ok := parseManifestName(base)
		isManifest := ok
		if !ok {
			seq, _, _, ok = parseSegmentName(base)
		}
		if !ok {
			continue // not ours
		}
		st.maxSeq = max(st.maxSeq, seq)
		if isTmp {
			if err := fs.Remove(fs.PathJoin(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("snapshot: sweep %s: %w", name, err))
			}
			continue
		}
		if isManifest {
			st.manifests = append(st.manifests, seq)
		}
	}
	slices.Sort(st.manifests)
	slices.Reverse(st.manifests)
	return st, errors.Join(errs...)
}

// newestManifest returns the newest manifest of seqs that decodes, and its
// name; nil if none does. Corrupt manifests are passed over; other errors,
// ErrVersion included, are returned.
func newestManifest(fs vfs.FS, dir string, seqs []uint64) (*manifest, string, error) {
	for _, seq := range seqs {
		name := manifestName(seq)
		m, _, err := readManifest(fs, fs.PathJoin(dir, name))
		if err == nil {
			return &m, name, nil
		}
		if !errors.Is(err, ErrCorrupt) {
			return nil, "", err
		}
	}
	return nil, "", nil
}

// cleanup removes every manifest not in keep and every segment not in live,
// then syncs dir.
func cleanup(fs vfs.FS, dir string, keep, live map[string]bool) error {
	names, err := fs.List(dir)
	if err != nil {
		return fmt.Errorf("snapshot: cleanup: list %s: %w", dir, err)
	}
	var errs []error
	removed := false
	for _, name := range names {
		var drop bool
		if _, ok := parseManifestName(name); ok {
			drop = !keep[name]
		} else if _, _, _, ok := parseSegmentName(name); ok {
			drop = !live[name]
		}
		if !drop {
			continue
		}
		if err := fs.Remove(fs.PathJoin(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("snapshot: cleanup: remove %s: %w", name, err))
			continue
		}
		removed = true
	}
	if removed {
		if err := syncDir(fs, dir); err != nil {
			errs = append(errs, fmt.Errorf("snapshot: cleanup: %w", err))
		}
	}
	return errors.Join(errs...)
}
