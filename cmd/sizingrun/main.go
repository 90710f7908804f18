// Command sizingrun measures what the README's example costs a user whose
// traffic is far below the ExpectedRate given: Options{Dir, Window: 24h,
// ExpectedRate: 5000} holding 450k keys. It prints one JSON line: the
// filters' bytes, the final snapshot's size and time, and the process's
// resident memory (now and peak).
//
//	go run ./cmd/sizingrun                    # 450k keys at once, in the first generation
//	go run ./cmd/sizingrun -spread=24h        # 450k keys spread over a day (a virtual clock)
//
// docs/sizing.md runs it side by side with the binary of an earlier
// version. It is a benchmark-style run, not a test: CI does not run it.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/procmem"
)

func main() {
	keys := flag.Int("keys", 450_000, "distinct keys to observe and commit")
	rate := flag.Float64("rate", 5000, "Options.ExpectedRate")
	window := flag.Duration("window", 24*time.Hour, "Options.Window")
	spread := flag.Duration("spread", 0, "virtual time over which the keys arrive (0: all at the real time)")
	prob := flag.Bool("prob", false, "Options.Probabilistic")
	dir := flag.String("dir", "", "state directory (default: a temporary one, removed at the end)")
	flag.Parse()

	stateDir := *dir
	if stateDir == "" {
		d, err := os.MkdirTemp("", "dedup-sizing-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		stateDir = d
	}
	var mu sync.Mutex
	now := time.Now()
	opts := dedup.Options{Dir: stateDir, Window: *window, ExpectedRate: *rate, Probabilistic: *prob}
	if *spread > 0 {
		opts.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	}
	var logged []string
	opts.Logf = func(f string, a ...any) { logged = append(logged, strings.TrimSpace(sprintf(f, a...))) }
	e, err := dedup.Open(opts)
	if err != nil {
		log.Fatal(err)
	}
	const batch = 4096
	step := *spread / time.Duration(*keys)
	b := make([][]byte, 0, batch)
	out := make([]dedup.Verdict, batch)
	start := time.Now()
	for i := 0; i < *keys; i += batch {
		b = b[:0]
		for j := i; j < min(i+batch, *keys); j++ {
			k := make([]byte, 16)
			binary.LittleEndian.PutUint64(k, uint64(j))
			binary.LittleEndian.PutUint64(k[8:], 0x5eed)
			b = append(b, k)
		}
		if err := e.ObserveBatch(b, out[:len(b)]); err != nil {
			log.Fatal(err)
		}
		if err := e.Commit([]byte(strconv.Itoa(i))); err != nil {
			log.Fatal(err)
		}
		if *spread > 0 {
			mu.Lock()
			now = now.Add(time.Duration(len(b)) * step)
			mu.Unlock()
		}
	}
	fill := time.Since(start)
	st := e.Stats()
	snapStart := time.Now()
	if err := e.Snapshot(); err != nil {
		log.Fatal(err)
	}
	snapTime := time.Since(snapStart)
	mem, err := procmem.Read(0) // zeros where /proc is missing
	if err != nil {
		log.Print(err)
	}
	rss, hwm := mem.RSS, mem.Peak
	if err := e.Close(); err != nil {
		log.Fatal(err)
	}
	var snapBytes int64
	_ = filepath.WalkDir(filepath.Join(stateDir, dedup.SnapshotDir), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				snapBytes += info.Size()
			}
		}
		return nil
	})
	res := map[string]any{
		"keys": *keys, "spread": spread.String(), "filter_keys": st.FilterKeys, "generations": st.Generations,
		"filter_bytes": st.FilterBytes, "sized_generation_keys": st.SizedGenerationKeys,
		"snapshot_bytes": snapBytes, "snapshot_seconds": snapTime.Seconds(),
		"rss_bytes": rss, "peak_rss_bytes": hwm, "fill_seconds": fill.Seconds(), "open_log": logged,
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(res); err != nil {
		log.Fatal(err)
	}
}

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }
