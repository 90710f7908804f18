package dedup_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/diskuse"
)

var diskKeys = flag.Int("diskperkey.n", 1_000_000, "keys stored by BenchmarkDiskPerKey")

// BenchmarkDiskPerKey stores -diskperkey.n distinct random keys of 16 and
// of 96 bytes in an exact-mode state (ObserveBatch of 1000, a commit per
// batch; ExpectedRate sized for them), closes it, and reports the bytes
// the directory takes on disk (du: allocated blocks) per key, and, with
// -test.v, by kind of file. One iteration is the whole run:
// -benchtime=1x. DEDUP_DISKPERKEY_DIR=dir keeps the state in dir.
//
//	go test -run '^$' -bench BenchmarkDiskPerKey -benchtime 1x -diskperkey.n 10000000 .
func BenchmarkDiskPerKey(b *testing.B) {
	for _, size := range []int{16, 96} {
		b.Run(fmt.Sprintf("key%d", size), func(b *testing.B) {
			n := *diskKeys
			for b.Loop() {
				dir := b.TempDir()
				if d := os.Getenv("DEDUP_DISKPERKEY_DIR"); d != "" {
					dir = d
				}
				// The keys arrive within one generation (a quarter of the
				// window): sized for them.
				e, err := Open(Options{Dir: dir, Window: time.Hour, Generations: 4, ExpectedRate: float64(n) / 900})
				if err != nil {
					b.Fatal(err)
				}
				const batch = 1000
				keys := make([][]byte, batch)
				buf := make([]byte, batch*size)
				out := make([]Verdict, batch)
				x := uint64(size)*0x9e3779b97f4a7c15 + 1
				for done := 0; done < n; done += batch {
					for i := range keys {
						k := buf[i*size : (i+1)*size]
						for j := 0; j < size; j += 8 {
							x ^= x << 13
							x ^= x >> 7
							x ^= x << 17
							binary.LittleEndian.PutUint64(k[j:], x)
						}
						keys[i] = k
					}
					if err := e.ObserveBatch(keys, out); err != nil {
						b.Fatal(err)
					}
					if err := e.Commit(nil); err != nil {
						b.Fatal(err)
					}
				}
				if err := e.Close(); err != nil {
					b.Fatal(err)
				}
				du, err := diskuse.Bytes(vfs.Default, dir)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(du)/float64(n), "disk-B/key")
				b.Logf("%d keys of %d bytes: %d bytes on disk: %s", n, size, du, diskBreakdown(dir))
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// diskBreakdown sums the sizes of the files under dir by kind.
func diskBreakdown(dir string) string {
	sums := map[string]int64{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		name := d.Name()
		kind := "other"
		switch {
		case strings.Contains(path, string(os.PathSeparator)+SnapshotDir+string(os.PathSeparator)):
			kind = "snapshots"
		case strings.HasPrefix(name, "exact-commits-free-"):
			kind = "free segments"
		case strings.HasPrefix(name, "exact-commits-"):
			kind = "commit log"
		case strings.HasSuffix(name, ".sst"):
			kind = "tables"
		}
		sums[kind] += info.Size()
		return nil
	})
	var out []string
	for k, v := range sums {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
