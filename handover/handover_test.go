package handover_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/handover"
	"github.com/streamdedup/dedup/handover/handovertest"
	"github.com/streamdedup/dedup/internal/fsperm"
	"gocloud.dev/blob"
)

// stores returns a store of each kind the package serves, by name.
func stores(t *testing.T) map[string]string {
	s3url, _ := handovertest.S3(t)
	dir := t.TempDir()
	return map[string]string{
		"mem":  "mem://",
		"file": "file://" + filepath.ToSlash(dir),
		"s3":   s3url,
	}
}

// memStore returns an in-memory bucket and a store over it, closed when t
// ends; a test damages the store's objects through the bucket.
func memStore(t *testing.T) (*blob.Bucket, *handover.Store) {
	t.Helper()
	b, err := blob.OpenBucket(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	s := handover.NewStore(b)
	t.Cleanup(func() { s.Close() })
	return b, s
}

// backup makes an engine state holding keys k0..k(n-1) committed with
// checkpoint cp and returns a backup of it.
func backup(t *testing.T, n int, cp string) string {
	t.Helper()
	dir := t.TempDir()
	e, err := dedup.Open(dedup.Options{Dir: filepath.Join(dir, "state"), ExpectedRate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if v, err := e.Observe(fmt.Appendf(nil, "k%d", i)); err != nil || v != dedup.New {
			t.Fatalf("observe k%d: %v %v", i, v, err)
		}
	}
	if err := e.Commit([]byte(cp)); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "backup")
	if err := e.Backup(dest); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return dest
}

var part = handover.Partition{Group: "g", Topic: "in", Partition: 3}

// TestExportFetchRestore moves a state through each store: the restored
// engine holds every key and the checkpoint, and an unchanged table is
// not uploaded twice.
func TestExportFetchRestore(t *testing.T) {
	ctx := context.Background()
	src := backup(t, 5000, "cp-100")
	for name, url := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := handovertest.Open(t, url)
			var h handover.Hasher
			m, st, err := s.Export(ctx, part, src, handover.Manifest{Offset: 100, Window: time.Hour, Format: "f"}, &h)
			if err != nil {
				t.Fatal(err)
			}
			if st.Uploaded == 0 || st.Sent == 0 {
				t.Fatalf("first export uploaded %d of %d files", st.Uploaded, st.Files)
			}
			_, st2, err := s.Export(ctx, part, src, handover.Manifest{Offset: 100, Window: time.Hour, Format: "f"}, &h)
			if err != nil {
				t.Fatal(err)
			}
			if st2.Uploaded != 0 {
				t.Fatalf("the same state exported again uploaded %d files", st2.Uploaded)
			}
			ms, err := s.Latest(ctx, part, 100, 5)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 2 || ms[0].Generation != m.Generation+1 || ms[0].Offset != 100 {
				t.Fatalf("latest: %+v", ms)
			}
			dst := filepath.Join(t.TempDir(), "fetched")
			n, err := s.Fetch(ctx, ms[0], dst)
			if err != nil || n != m.Bytes() {
				t.Fatalf("fetch: %d bytes (want %d), %v", n, m.Bytes(), err)
			}
			state := filepath.Join(t.TempDir(), "state")
			opts, err := dedup.RestoreBackup(dst, state)
			if err != nil {
				t.Fatal(err)
			}
			e, err := dedup.Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if got := e.Checkpoint(); !bytes.Equal(got, []byte("cp-100")) {
				t.Fatalf("checkpoint %q", got)
			}
			for i := range 5000 {
				if v, err := e.Peek(fmt.Appendf(nil, "k%d", i)); err != nil || v == dedup.New {
					t.Fatalf("k%d after restore: %v %v", i, v, err)
				}
			}
		})
	}
}

// TestLatestByOffset: the export chosen is the newest at or before the
// offset asked, whatever was written last; none at all or only newer
// ones are told apart.
func TestLatestByOffset(t *testing.T) {
	ctx := context.Background()
	src := backup(t, 10, "x")
	s := handovertest.Open(t, "mem://")
	if _, err := s.Latest(ctx, part, 1000, 1); !errors.Is(err, handover.ErrNotFound) {
		t.Fatalf("empty store: %v", err)
	}
	for _, off := range []int64{500, 900, 300} { // a late writer exports an older state last
		if _, _, err := s.Export(ctx, part, src, handover.Manifest{Offset: off}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ max, want int64 }{{1000, 900}, {899, 500}, {500, 500}, {300, 300}} {
		ms, err := s.Latest(ctx, part, c.max, 1)
		if err != nil || ms[0].Offset != c.want {
			t.Fatalf("latest at or before %d: %+v %v, want offset %d", c.max, ms, err, c.want)
		}
	}
	if ms, err := s.Latest(ctx, part, 299, 1); !errors.Is(err, handover.ErrStale) {
		t.Fatalf("every export past the offset: %v %v", ms, err)
	}
	other := part
	other.Partition = 4
	if _, err := s.Latest(ctx, other, 1000, 1); !errors.Is(err, handover.ErrNotFound) {
		t.Fatalf("another partition: %v", err)
	}
}

// TestDamagedExport: a file changed, truncated or missing in the store
// fails verification with ErrDamaged, and nothing is left at dst.
func TestDamagedExport(t *testing.T) {
	ctx := context.Background()
	src := backup(t, 100, "x")
	for _, damage := range []string{"flip", "truncate", "delete"} {
		t.Run(damage, func(t *testing.T) {
			b, s := memStore(t)
			m, _, err := s.Export(ctx, part, src, handover.Manifest{Offset: 7}, nil)
			if err != nil {
				t.Fatal(err)
			}
			big := m.Files[0]
			for _, f := range m.Files {
				if f.Size > big.Size {
					big = f
				}
			}
			key := "g/in/3/files/" + big.SHA256
			data, err := b.ReadAll(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			switch damage {
			case "flip":
				data[len(data)/2] ^= 1
				err = b.WriteAll(ctx, key, data, nil)
			case "truncate":
				err = b.WriteAll(ctx, key, data[:len(data)-1], nil)
			case "delete":
				err = b.Delete(ctx, key)
			}
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "f")
			if _, err := s.Fetch(ctx, m, dst); !errors.Is(err, handover.ErrDamaged) || !strings.Contains(err.Error(), big.Path) {
				t.Fatalf("fetch of a damaged export: %v", err)
			}
			if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("dst left behind: %v", err)
			}
		})
	}
}

// TestPartialExportInvisible: files uploaded without their manifest (an
// exporter killed before it) are no export; a manifest that does not
// decode is damaged.
func TestPartialExportInvisible(t *testing.T) {
	ctx := context.Background()
	b, s := memStore(t)
	if err := b.WriteAll(ctx, "g/in/3/files/abc", []byte("half"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Latest(ctx, part, 100, 1); !errors.Is(err, handover.ErrNotFound) {
		t.Fatalf("files without a manifest: %v", err)
	}
	if err := b.WriteAll(ctx, fmt.Sprintf("g/in/3/manifests/%020d-%020d-w.json", 5, 1), []byte("{"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Latest(ctx, part, 100, 1); !errors.Is(err, handover.ErrDamaged) {
		t.Fatalf("a torn manifest: %v", err)
	}
}

// TestWritersNeverOverwrite: two stores (two owners) exporting the same
// partition at the same generation write two manifests, each intact.
func TestWritersNeverOverwrite(t *testing.T) {
	ctx := context.Background()
	src := backup(t, 10, "x")
	for name, url := range stores(t) {
		t.Run(name, func(t *testing.T) {
			b, err := blob.OpenBucket(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			a := handover.NewStore(b)
			c := handover.NewStore(b)
			ma, _, err := a.Export(ctx, part, src, handover.Manifest{Offset: 10}, nil)
			if err != nil {
				t.Fatal(err)
			}
			mc, _, err := c.Export(ctx, part, src, handover.Manifest{Offset: 10}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ms, err := a.Latest(ctx, part, 10, 10)
			if err != nil || len(ms) != 2 {
				t.Fatalf("latest: %v %v", ms, err)
			}
			if ms[0].Writer != mc.Writer || ms[1].Writer != ma.Writer || ms[0].Generation <= ms[1].Generation {
				t.Fatalf("manifests %+v %+v, written by %s then %s", ms[0], ms[1], ma.Writer, mc.Writer)
			}
			b.Close()
		})
	}
}

// TestPrune keeps the newest exports and their files and drops the rest.
func TestPrune(t *testing.T) {
	ctx := context.Background()
	_, s := memStore(t)
	s.Keep, s.Grace = 2, 0
	for i := range 4 {
		src := backup(t, 10+i, fmt.Sprint(i))
		if _, _, err := s.Export(ctx, part, src, handover.Manifest{Offset: int64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Prune(ctx, part); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Latest(ctx, part, 100, 10)
	if err != nil || len(ms) != 2 || ms[0].Offset != 3 || ms[1].Offset != 2 {
		t.Fatalf("after prune: %v %v", ms, err)
	}
	for _, m := range ms {
		if _, err := s.Fetch(ctx, m, filepath.Join(t.TempDir(), "f")); err != nil {
			t.Fatalf("kept export %d: %v", m.Offset, err)
		}
	}
	if _, err := s.Latest(ctx, part, 1, 10); !errors.Is(err, handover.ErrStale) {
		t.Fatalf("pruned exports still listed: %v", err)
	}
}

// TestFileStoreIsPrivate: under a umask that lets everyone read, a
// file:// store's directories are 0700 and its objects 0600 (an export
// holds the state's secret), and so are the directories and files Fetch
// writes. No attribute sidecar is written.
func TestFileStoreIsPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	ctx := context.Background()
	src := backup(t, 100, "cp-1")
	dir := t.TempDir()
	s := handovertest.Open(t, "file://"+filepath.ToSlash(dir))
	m, _, err := s.Export(ctx, part, src, handover.Manifest{Offset: 1, Window: time.Hour, Format: "f"}, new(handover.Hasher))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "fetched")
	if _, err := s.Fetch(ctx, m, dst); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{dir, dst} {
		objects := 0
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || path == dir {
				return err // the store's own directory is the user's
			}
			if filepath.Ext(path) == ".attrs" {
				t.Errorf("%s: an attribute sidecar (metadata=skip is the default)", path)
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			want := fsperm.FileMode
			if d.IsDir() {
				want = fsperm.DirMode
			} else {
				objects++
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("%s has mode %v, want %v", path, got, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if objects < len(m.Files) {
			t.Fatalf("%s holds %d files, the export %d", root, objects, len(m.Files))
		}
	}
}

// TestFileStoreURL: file:///DIR creates a missing DIR 0700, and a file
// URL with a host (file://relative/dir) is an error naming the form.
func TestFileStoreURL(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "a", "ho")
	s, err := handover.Open(context.Background(), "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != fsperm.DirMode {
			t.Errorf("%s has mode %v, want %v", d, got, fsperm.DirMode)
		}
	}
	if _, err := handover.Open(context.Background(), "file://relative/dir"); err == nil || !strings.Contains(err.Error(), "file:///") {
		t.Errorf("file://relative/dir: %v, want an error naming file:///ABSOLUTE/DIR", err)
	}
}
