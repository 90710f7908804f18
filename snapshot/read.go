package snapshot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// readManifest reads and decodes the manifest at path, and returns its size.
func readManifest(fs vfs.FS, path string) (m manifest, size int64, err error) {
	f, err := fs.Open(path)
	if err != nil {
		return m, 0, fmt.Errorf("snapshot: open %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("snapshot: close %s: %w", path, cerr))
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return m, 0, fmt.Errorf("snapshot: stat %s: %w", path, err)
	}
	size = st.Size()
	if size > MaxManifestSize {
		return m, size, fmt.Errorf("snapshot: read %s: %w", path, corruptf("manifest: %d bytes, over the limit %d", size, MaxManifestSize))
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return m, size, fmt.Errorf("snapshot: read %s: %w", path, err)
	}
	if m, err = decodeManifest(b); err != nil {
		return m, size, fmt.Errorf("snapshot: read %s: %w", path, err)
	}
	return m, size, nil
}

// readSegment reads and fully verifies r's segment and returns its payload.
func readSegment(fs vfs.FS, dir string, r ref) (payload []byte, err error) {
	path := fs.PathJoin(dir, r.Name)
	f, err := fs.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("snapshot: segment %s: %w", path, &corruptError{msg: "referenced segment missing", cause: err})
		}
		return nil, fmt.Errorf("snapshot: open %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("snapshot: close %s: %w", path, cerr))
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("snapshot: stat %s: %w", path, err)
	}
	if st.Size() != r.Size {
		return nil, fmt.Errorf("snapshot: segment %s: %w", path, corruptf("size %d, manifest says %d", st.Size(), r.Size))
	}
	b := make([]byte, r.Size)
	if _, err := io.ReadFull(f, b); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("snapshot: segment %s: %w", path, &corruptError{msg: "short read", cause: err})
		}
		return nil, fmt.Errorf("snapshot: read %s: %w", path, err)
	}
	m, payload, sum, err := decodeSegment(b)
	if err != nil {
		return nil, fmt.Errorf("snapshot: segment %s: %w", path, err)
	}
	if m != r.meta {
		return nil, fmt.Errorf("snapshot: segment %s: %w", path, corruptf("metadata %+v, manifest says %+v", m, r.meta))
	}
	if sum != r.Sum {
		return nil, fmt.Errorf("snapshot: segment %s: %w", path, corruptf("file checksum %016x, manifest says %016x", sum, r.Sum))
	}
	return payload, nil
}

// Read reads the snapshot whose manifest is at path, verifying every
// checksum of the manifest and of every segment, and loads every payload.
// Damage is reported as an error wrapping ErrCorrupt (a missing segment
// included), a newer format as ErrVersion.
func Read(fs vfs.FS, path string) (*Snapshot, error) {
	m, _, err := readManifest(fs, path)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{Path: path, Header: m.Header, Generations: make([]GenerationInfo, 0, len(m.Refs))}
	dir := fs.PathDir(path)
	for _, r := range m.Refs {
		payload, err := readSegment(fs, dir, r)
		if err != nil {
			return nil, fmt.Errorf("snapshot: read %s: %w", path, err)
		}
		s.Generations = append(s.Generations, GenerationInfo{SegmentInfo: r.info(), Payload: payload})
	}
	return s, nil
}

// Verify checks the snapshot whose manifest is at path as Read does, holding
// one payload in memory at a time.
func Verify(fs vfs.FS, path string) error {
	m, _, err := readManifest(fs, path)
	if err != nil {
		return err
	}
	dir := fs.PathDir(path)
	for _, r := range m.Refs {
		if _, err := readSegment(fs, dir, r); err != nil {
			return fmt.Errorf("snapshot: verify %s: %w", path, err)
		}
	}
	return nil
}

// Inspect summarises the snapshot whose manifest is at path. It verifies the
// manifest, and each segment's size, metadata and trailer against it, but not
// the payload checksums: use Verify for that.
func Inspect(fs vfs.FS, path string) (Info, error) {
	m, size, err := readManifest(fs, path)
	if err != nil {
		return Info{}, err
	}
	dir := fs.PathDir(path)
	for _, r := range m.Refs {
		if !segmentIntact(fs, dir, r) {
			return Info{}, fmt.Errorf("snapshot: inspect %s: %w", path, corruptf("segment %s missing or damaged", r.Name))
		}
	}
	return m.info(path, size), nil
}

// Latest returns the newest valid snapshot in dir, fully verified as by Read.
// A newer snapshot that is corrupt is passed over and reported in
// Snapshot.Skipped. If every snapshot is corrupt the error wraps ErrCorrupt;
// if dir holds none (or does not exist) it wraps ErrNotFound. A newest
// snapshot of a newer format version stops the search with ErrVersion rather
// than silently falling back to an older one; other I/O errors are returned
// as they are. Latest removes stray temporary files.
func Latest(fs vfs.FS, dir string) (*Snapshot, error) {
	if _, err := fs.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no directory %s", ErrNotFound, dir)
	}
	st, err := scan(fs, dir)
	if err != nil {
		return nil, err
	}
	var skipped []error
	for _, seq := range st.manifests {
		s, err := Read(fs, fs.PathJoin(dir, manifestName(seq)))
		if err == nil {
			s.Skipped = skipped
			return s, nil
		}
		if !errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		skipped = append(skipped, err)
	}
	if len(skipped) > 0 {
		return nil, fmt.Errorf("snapshot: no valid snapshot in %s: %w", dir, errors.Join(skipped...))
	}
	return nil, fmt.Errorf("%w: no snapshot in %s", ErrNotFound, dir)
}

// String formats i for people, as `dedup snapshot inspect` prints it: the
// header, then one line per segment.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "snapshot %s\n", i.Path)
	fmt.Fprintf(&b, "  version %d  seed %#016x  commit seq %d  created %s\n",
		i.Version, i.Seed, i.CommitSeq, time.Unix(0, i.Created).UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(&b, "  %d segments, %d bytes (manifest %d, options %d)\n",
		len(i.Segments), i.TotalSize, i.ManifestSize, len(i.Options))
	for _, s := range i.Segments {
		state := "live"
		if s.Final {
			state = "final"
		}
		fmt.Fprintf(&b, "  gen %d shard %d  %s .. %s  %d keys  %s  %s  %d bytes  %s\n",
			s.ID, s.Shard,
			time.Unix(0, s.Start).UTC().Format(time.RFC3339), time.Unix(0, s.End).UTC().Format(time.RFC3339),
			s.Count, s.Kind, state, s.Size, s.Name)
	}
	return b.String()
}

// NewestCommit returns the highest commit sequence number that a snapshot
// in dir covers, and the path of its manifest: every manifest whose
// checksums hold counts, whatever its segments (a damaged segment does not
// make the commits it covers any less committed). 0 and "" if dir holds
// none. It changes nothing in dir.
func NewestCommit(fs vfs.FS, dir string) (seq uint64, path string, err error) {
	if fi, err := fs.Stat(dir); errors.Is(err, os.ErrNotExist) || err == nil && !fi.IsDir() {
		return 0, "", nil // no snapshot: a file there is the snapshots' problem
	}
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("snapshot: list %s: %w", dir, err)
	}
	for _, name := range names {
		if _, ok := parseManifestName(name); !ok {
			continue
		}
		p := fs.PathJoin(dir, name)
		m, _, err := readManifest(fs, p)
		if errors.Is(err, ErrCorrupt) {
			continue
		}
		if err != nil {
			return 0, "", err
		}
		if m.Header.CommitSeq > seq || path == "" {
			seq, path = m.Header.CommitSeq, p
		}
	}
	return seq, path, nil
}

// LostSuffix ends the name of a manifest that SetAside moved out of use.
const LostSuffix = ".lost"

// SetAside moves every snapshot of dir that covers a commit past seq out of
// use, as evidence: its manifest is renamed with LostSuffix (Latest, Write
// and NewestCommit pass such files over, and no cleanup removes them), and
// the directory is synced. It returns the new paths. The engine calls it
// when its state accepted the loss of the commits such a snapshot covers.
func SetAside(fs vfs.FS, dir string, seq uint64) ([]string, error) {
	if fi, err := fs.Stat(dir); errors.Is(err, os.ErrNotExist) || err == nil && !fi.IsDir() {
		return nil, nil
	}
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: list %s: %w", dir, err)
	}
	var moved []string
	for _, name := range names {
		if _, ok := parseManifestName(name); !ok {
			continue
		}
		p := fs.PathJoin(dir, name)
		m, _, err := readManifest(fs, p)
		if err != nil || m.Header.CommitSeq <= seq {
			continue
		}
		if err := fs.Rename(p, p+LostSuffix); err != nil {
			return moved, fmt.Errorf("snapshot: set aside %s: %w", p, err)
		}
		moved = append(moved, p+LostSuffix)
	}
	if len(moved) > 0 {
		if err := syncDir(fs, dir); err != nil {
			return moved, err
		}
	}
	return moved, nil
}
