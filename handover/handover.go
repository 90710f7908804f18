// Package handover moves a partition's dedup state between the instances of
// a consumer group through a shared blob store (gocloud.dev/blob): the
// owner exports its engine's backup with a [Manifest], and the next owner
// imports the newest export it may use instead of rebuilding the state by
// replaying the input.
//
// # Contract
//
// A [Store] is opened from a URL: file:///DIR (a shared filesystem),
// s3://BUCKET?endpoint=...&region=... (object storage), mem:// (tests).
// An export of partition P is a set of files and a manifest naming them,
// with the size and SHA-256 of each, the input offset the state covers
// (the next offset to read), the window, the state format, a generation
// number and the writer. Files are stored under their SHA-256, so a file
// already in the store (a Pebble table, or a snapshot segment of a past
// generation, that did not change since the last export) is not uploaded
// again: exports are incremental for those and whole for the rest (the
// live generation's filters, the store's log and manifest). A [Hasher]
// keeps the checksums of such files between exports, and files are
// hashed, uploaded and downloaded a few at a time.
//
// The manifest is written last, under a name no other export uses
// (offset, generation, writer), with a create-if-absent write: a manifest
// is never overwritten, and no file is listed before it is stored. A
// reader therefore sees either a whole export or none of it. The export an
// owner imports is chosen by offset, not by time: the newest one whose
// offset is at most the group's committed offset ([Store.Latest]), so an
// owner that exports late (a zombie, or one slow to upload) cannot shadow
// a newer export with an older state, and an export ahead of the group's
// offset (whose records the group may read again) is never used. On
// S3, create-if-absent is If-None-Match: *; where a store ignores it, the
// names alone keep writers apart. Files are written whole (an S3 PUT, a
// rename on file://), and the same name always holds the same bytes.
//
// [Store.Fetch] verifies every file's size and checksum as it downloads
// it; a missing or damaged file is an [ErrDamaged] error, and the caller
// falls back to replay. [Store.Prune] keeps the newest few exports of a
// partition and deletes the files no kept manifest names, once they are
// older than a grace period, so that an export being written is not
// robbed of its files. A concurrent export that reuses an old file as it
// is pruned can lose it: its import then fails verification and falls
// back, which costs time, never correctness.
//
// An export holds the state's fingerprint secret and every fingerprint:
// the store must be as private as the state directory. On file:// the
// directories a Store creates are 0700 (unless the URL sets
// dir_file_mode) and the objects it writes 0600; the files [Store.Fetch]
// writes are 0600 in 0700 directories. Other stores are access-controlled
// by their own means (an S3 bucket policy).
package handover

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/streamdedup/dedup/internal/fsperm"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// URLs
	_ "gocloud.dev/blob/memblob"  // mem:// URLs
	_ "gocloud.dev/blob/s3blob"   // s3:// URLs
	"gocloud.dev/gcerrors"
)

// ManifestVersion is the version of the manifest format written.
const ManifestVersion = 1

// Partition names the partition an export belongs to.
type Partition struct {
	Group     string
	Topic     string
	Partition int32
}

func (p Partition) prefix() string {
	return path.Join(escape(p.Group), escape(p.Topic), strconv.Itoa(int(p.Partition)))
}

// escape keeps a name to one path element.
func escape(s string) string { return strings.ReplaceAll(s, "/", "%2F") }

// File is one file of an export.
type File struct {
	// Path is the file's path in the exported directory, slash-separated.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Manifest describes one export.
type Manifest struct {
	Version   int    `json:"version"`
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Offset is the input offset the state covers: the next one to read.
	Offset int64 `json:"offset"`
	// Generation numbers the partition's exports: one more than the
	// highest the writer saw.
	Generation uint64 `json:"generation"`
	// Writer names the process that wrote it (random per [Store]).
	Writer string `json:"writer"`
	// Window is the engine's window; Format names the state's format and
	// options, which an importer must match.
	Window  time.Duration `json:"window"`
	Format  string        `json:"format"`
	Files   []File        `json:"files"`
	Created time.Time     `json:"created"`
}

// Bytes is the sum of the files' sizes.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Store is a blob bucket holding exports. It is safe for concurrent use.
type Store struct {
	b      *blob.Bucket
	writer string
	// Keep is how many exports of a partition Prune keeps; Grace how old
	// an unnamed file must be before Prune deletes it.
	Keep  int
	Grace time.Duration
}

// Open opens the bucket at url: file:///DIR, s3://BUCKET?..., mem://.
// On file://, DIR must be absolute (file://HOST/... is refused: the
// host part would be dropped), DIR and its missing parents are created
// [fsperm.DirMode], as the directories the store creates, unless
// the URL's dir_file_mode says otherwise, and no attribute sidecar files
// are written (metadata=skip, unless the URL says otherwise): an export
// needs none, and fileblob would compute an MD5 of every byte for them.
func Open(ctx context.Context, url string) (*Store, error) {
	u, err := fileOptions(url)
	if err != nil {
		return nil, fmt.Errorf("handover: open %q: %w", url, err)
	}
	b, err := blob.OpenBucket(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("handover: open %q: %w", url, err)
	}
	return NewStore(b), nil
}

// fileOptions adds dir_file_mode=0700 and metadata=skip to a file:// URL
// that does not set them, and creates its directory; other URLs are
// returned as they are. A file:// URL with a host is an error.
func fileOptions(rawURL string) (string, error) {
	u, err := neturl.Parse(rawURL)
	if err != nil || u.Scheme != "file" {
		return rawURL, nil // blob.OpenBucket reports what is wrong
	}
	if u.Host != "" {
		return "", fmt.Errorf("a file URL names an absolute directory, file:///ABSOLUTE/DIR (three slashes), not the host %q", u.Host)
	}
	q := u.Query()
	if !q.Has("dir_file_mode") {
		q.Set("dir_file_mode", fmt.Sprintf("%#o", fsperm.DirMode))
	}
	if !q.Has("metadata") {
		q.Set("metadata", "skip")
	}
	mode, err := strconv.ParseUint(q.Get("dir_file_mode"), 0, 32)
	if err != nil {
		return "", fmt.Errorf("dir_file_mode %q: %w", q.Get("dir_file_mode"), err)
	}
	if u.Path != "" {
		if err := os.MkdirAll(filepath.FromSlash(u.Path), os.FileMode(mode).Perm()); err != nil {
			return "", err
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// privateObject, the BeforeWrite of every object a Store writes, makes
// the file fileblob writes [fsperm.FileMode] before it is renamed
// to the object's name; on other stores it does nothing.
func privateObject(as func(any) bool) error {
	var f *os.File
	if !as(&f) {
		return nil
	}
	if err := f.Chmod(fsperm.FileMode); err != nil {
		return fmt.Errorf("handover: make %s private: %w", f.Name(), err)
	}
	return nil
}

// NewStore returns a Store over b; closing the Store closes b.
func NewStore(b *blob.Bucket) *Store {
	var id [6]byte
	_, _ = rand.Read(id[:])
	return &Store{b: b, writer: hex.EncodeToString(id[:]), Keep: 3, Grace: 10 * time.Minute}
}

// Close closes the bucket.
func (s *Store) Close() error { return s.b.Close() }

// manifestName is "<offset>-<generation>-<writer>.json", zero-padded so
// that names sort by offset, then generation.
func manifestName(m *Manifest) string {
	return fmt.Sprintf("%020d-%020d-%s.json", m.Offset, m.Generation, m.Writer)
}

func parseManifestName(name string) (offset int64, gen uint64, ok bool) {
	parts := strings.SplitN(strings.TrimSuffix(name, ".json"), "-", 3)
	if len(parts) != 3 || !strings.HasSuffix(name, ".json") {
		return 0, 0, false
	}
	o, err1 := strconv.ParseInt(parts[0], 10, 64)
	g, err2 := strconv.ParseUint(parts[1], 10, 64)
	return o, g, err1 == nil && err2 == nil && o >= 0
}

type listed struct {
	key    string
	offset int64
	gen    uint64
}

// list returns p's manifests, newest (highest offset, then generation)
// first.
func (s *Store) list(ctx context.Context, p Partition) ([]listed, error) {
	pre := p.prefix() + "/manifests/"
	it := s.b.List(&blob.ListOptions{Prefix: pre})
	var out []listed
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("handover: list %s: %w", pre, err)
		}
		if off, gen, ok := parseManifestName(strings.TrimPrefix(o.Key, pre)); ok {
			out = append(out, listed{o.Key, off, gen})
		}
	}
	slices.SortFunc(out, func(a, b listed) int {
		if c := cmp.Compare(b.offset, a.offset); c != 0 {
			return c
		}
		return cmp.Compare(b.gen, a.gen)
	})
	return out, nil
}

// Latest returns the manifests of p's exports whose offset is at most
// maxOffset, newest first (at most n of them). It returns [ErrNotFound]
// when p has no export, [ErrStale] when every export is ahead of
// maxOffset.
func (s *Store) Latest(ctx context.Context, p Partition, maxOffset int64, n int) ([]*Manifest, error) {
	ls, err := s.list(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(ls) == 0 {
		return nil, ErrNotFound
	}
	var out []*Manifest
	var firstErr error
	for _, l := range ls {
		if l.offset > maxOffset || len(out) >= n {
			continue
		}
		m, err := s.readManifest(ctx, l.key)
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		if m.Offset != l.offset || m.Group != p.Group || m.Topic != p.Topic || m.Partition != p.Partition {
			firstErr = cmp.Or(firstErr, fmt.Errorf("%w: manifest %s describes %s-%d at %d", ErrDamaged, l.key, m.Topic, m.Partition, m.Offset))
			continue
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		if firstErr != nil {
			return nil, firstErr
		}
		return nil, fmt.Errorf("%w: %d exports, the oldest at offset %d, all past %d", ErrStale, len(ls), ls[len(ls)-1].offset, maxOffset)
	}
	return out, nil
}

func (s *Store) readManifest(ctx context.Context, key string) (*Manifest, error) {
	b, err := s.b.ReadAll(ctx, key)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, fmt.Errorf("%w: manifest %s vanished: %w", ErrDamaged, key, err)
		}
		return nil, fmt.Errorf("handover: read %s: %w", key, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: manifest %s: %w", ErrDamaged, key, err)
	}
	if m.Version != ManifestVersion {
		return nil, fmt.Errorf("%w: manifest %s has version %d, want %d", ErrDamaged, key, m.Version, ManifestVersion)
	}
	return &m, nil
}

// parallel is how many files an export hashes and uploads, or a fetch
// downloads and verifies, at a time.
const parallel = 4

// Prune keeps p's newest Keep exports and deletes the older manifests,
// then the files no kept manifest names that are older than Grace.
func (s *Store) Prune(ctx context.Context, p Partition) error {
	ls, err := s.list(ctx, p)
	if err != nil {
		return err
	}
	keep := max(1, s.Keep)
	named := make(map[string]bool)
	for i, l := range ls {
		if i >= keep {
			if err := s.b.Delete(ctx, l.key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				return fmt.Errorf("handover: prune %s: %w", l.key, err)
			}
			continue
		}
		m, err := s.readManifest(ctx, l.key)
		if err != nil {
			return err
		}
		for _, f := range m.Files {
			named[f.SHA256] = true
		}
	}
	pre := p.prefix() + "/files/"
	it := s.b.List(&blob.ListOptions{Prefix: pre})
	old := time.Now().Add(-s.Grace)
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("handover: prune: list %s: %w", pre, err)
		}
		if named[strings.TrimPrefix(o.Key, pre)] || o.ModTime.After(old) {
			continue
		}
		if err := s.b.Delete(ctx, o.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("handover: prune %s: %w", o.Key, err)
		}
	}
}
