package handover

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup/internal/fsperm"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Hasher remembers the checksums of files that do not change once
// written (Pebble tables, named by number, and snapshot segments, named
// by write sequence), so that an incremental export does not read them
// again. The zero value is ready; it is safe for concurrent use.
type Hasher struct {
	mu   sync.Mutex
	sums map[string]hashed // by base name
}

type hashed struct {
	File
	mod time.Time
}

// immutable reports whether a file of this name never changes once
// written: a Pebble table or a snapshot segment.
func immutable(base string) bool {
	return strings.HasSuffix(base, ".sst") || strings.HasSuffix(base, ".seg")
}

func (h *Hasher) sum(full, rel string, info fs.FileInfo) (File, error) {
	base := filepath.Base(rel)
	imm := immutable(base)
	h.mu.Lock()
	f, ok := h.sums[base]
	h.mu.Unlock()
	if ok && imm && f.Size == info.Size() && f.mod.Equal(info.ModTime()) {
		f.Path = rel
		return f.File, nil
	}
	fh, err := os.Open(full)
	if err != nil {
		return File{}, err
	}
	defer fh.Close()
	d := sha256.New()
	n, err := io.Copy(d, fh)
	if err != nil {
		return File{}, err
	}
	f = hashed{File{Path: rel, Size: n, SHA256: hex.EncodeToString(d.Sum(nil))}, info.ModTime()}
	if imm {
		h.mu.Lock()
		if h.sums == nil {
			h.sums = make(map[string]hashed)
		}
		h.sums[base] = f
		h.mu.Unlock()
	}
	return f.File, nil
}

// each runs fn(i) for i in [0, n), at most parallel at a time, and
// returns the first error; after an error it starts no more.
func each(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, parallel)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// ExportStats says what an export moved.
type ExportStats struct {
	Files, Uploaded int   // files in the export, and those uploaded (the rest were stored already)
	Bytes, Sent     int64 // their bytes, and the bytes uploaded
	Took            time.Duration
}

// Export uploads the directory dir (an engine backup) as an export of p
// and writes its manifest, whose Offset, Window and Format the caller sets
// in m; the rest is filled in. h, if not nil, caches the checksums of
// immutable files between exports of the same partition.
func (s *Store) Export(ctx context.Context, p Partition, dir string, m Manifest, h *Hasher) (*Manifest, ExportStats, error) {
	start := time.Now()
	var st ExportStats
	if h == nil {
		h = &Hasher{}
	}
	type entry struct {
		full, rel string
		info      fs.FileInfo
	}
	var ents []entry
	err := filepath.WalkDir(dir, func(full string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("handover: %s is not a regular file", full)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, full)
		if err != nil {
			return err
		}
		ents = append(ents, entry{full, filepath.ToSlash(rel), info})
		return nil
	})
	if err != nil {
		return nil, st, fmt.Errorf("handover: export %s: %w", dir, err)
	}
	pre := p.prefix()
	files := make([]File, len(ents))
	uploaded := make([]bool, len(ents))
	err = each(ctx, len(ents), func(ctx context.Context, i int) error {
		f, err := h.sum(ents[i].full, ents[i].rel, ents[i].info)
		if err != nil {
			return fmt.Errorf("handover: export %s: %w", dir, err)
		}
		files[i] = f
		key := pre + "/files/" + f.SHA256
		ok, err := s.b.Exists(ctx, key)
		if err != nil {
			return fmt.Errorf("handover: export %s: %w", key, err)
		}
		if ok {
			return nil
		}
		if err := s.upload(ctx, key, ents[i].full); err != nil {
			return err
		}
		uploaded[i] = true
		return nil
	})
	for i, f := range files {
		st.Files++
		st.Bytes += f.Size
		if uploaded[i] {
			st.Uploaded++
			st.Sent += f.Size
		}
	}
	if err != nil {
		return nil, st, err
	}
	ls, err := s.list(ctx, p)
	if err != nil {
		return nil, st, err
	}
	var gen uint64
	for _, l := range ls {
		gen = max(gen, l.gen)
	}
	m.Version = ManifestVersion
	m.Group, m.Topic, m.Partition = p.Group, p.Topic, p.Partition
	m.Generation = gen + 1
	m.Writer = s.writer
	m.Files = files
	m.Created = time.Now().UTC()
	b, err := json.MarshalIndent(&m, "", " ")
	if err != nil {
		return nil, st, err
	}
	key := pre + "/manifests/" + manifestName(&m)
	if err := s.b.WriteAll(ctx, key, b, &blob.WriterOptions{ContentType: "application/json", IfNotExist: true, BeforeWrite: privateObject}); err != nil {
		return nil, st, fmt.Errorf("handover: write manifest %s: %w", key, err)
	}
	st.Took = time.Since(start)
	return &m, st, nil
}

func (s *Store) upload(ctx context.Context, key, full string) error {
	fh, err := os.Open(full)
	if err != nil {
		return fmt.Errorf("handover: export: %w", err)
	}
	defer fh.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a canceled writer is discarded, not committed
	w, err := s.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: "application/octet-stream", BeforeWrite: privateObject})
	if err != nil {
		return fmt.Errorf("handover: upload %s: %w", key, err)
	}
	if _, err := io.Copy(w, fh); err != nil {
		cancel()
		_ = w.Close()
		return fmt.Errorf("handover: upload %s: %w", key, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("handover: upload %s: %w", key, err)
	}
	return nil
}

// Fetch downloads the export m into dst, a directory that must not exist,
// verifying every file's size and checksum; a missing or damaged file is
// an [ErrDamaged] error. On error dst is removed.
func (s *Store) Fetch(ctx context.Context, m *Manifest, dst string) (int64, error) {
	if _, err := os.Stat(dst); err == nil {
		return 0, fmt.Errorf("handover: fetch: %q exists", dst)
	}
	p := Partition{m.Group, m.Topic, m.Partition}
	var n int64
	err := s.fetch(ctx, p, m, dst, &n)
	if err != nil {
		os.RemoveAll(dst)
	}
	return n, err
}

func (s *Store) fetch(ctx context.Context, p Partition, m *Manifest, dst string, n *int64) error {
	// A damaged file does not stop the fetch: every file is checked, and
	// each damaged one deleted from the store (its name is its checksum,
	// so its content is wrong whoever wrote it), so that the next export
	// uploads it again instead of naming the damaged copy.
	for _, f := range m.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
			return fmt.Errorf("%w: file path %q leaves the export", ErrDamaged, f.Path)
		}
	}
	var (
		mu      sync.Mutex
		damaged error
	)
	err := each(ctx, len(m.Files), func(ctx context.Context, i int) error {
		f := m.Files[i]
		full := filepath.Join(dst, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(full), fsperm.DirMode); err != nil {
			return fmt.Errorf("handover: fetch: %w", err)
		}
		key := p.prefix() + "/files/" + f.SHA256
		err := s.download(ctx, key, full, f)
		switch {
		case errors.Is(err, ErrDamaged):
			mu.Lock()
			damaged = cmp.Or(damaged, err)
			mu.Unlock()
			if derr := s.b.Delete(ctx, key); derr != nil && gcerrors.Code(derr) != gcerrors.NotFound {
				return errors.Join(err, derr)
			}
		case err != nil:
			return err
		default:
			atomic.AddInt64(n, f.Size)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return damaged
}

func (s *Store) download(ctx context.Context, key, full string, f File) error {
	r, err := s.b.NewReader(ctx, key, nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return fmt.Errorf("%w: file %s (%s) is missing", ErrDamaged, f.Path, key)
		}
		return fmt.Errorf("handover: fetch %s: %w", key, err)
	}
	defer r.Close()
	out, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fsperm.FileMode)
	if err != nil {
		return fmt.Errorf("handover: fetch: %w", err)
	}
	d := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, d), io.LimitReader(r, f.Size+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("handover: fetch %s: %w", key, err)
	}
	if n != f.Size {
		return fmt.Errorf("%w: file %s has %d bytes, the manifest says %d", ErrDamaged, f.Path, n, f.Size)
	}
	if got := hex.EncodeToString(d.Sum(nil)); got != f.SHA256 {
		return fmt.Errorf("%w: file %s has checksum %s, the manifest says %s", ErrDamaged, f.Path, got, f.SHA256)
	}
	return nil
}
