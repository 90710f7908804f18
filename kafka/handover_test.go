package kafka

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/handover/handovertest"
	"github.com/streamdedup/dedup/internal/fsperm"
	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// handoverStores are the stores the kafka tests run over: a shared
// directory and an in-process S3.
func handoverStores(t *testing.T) map[string]func(t *testing.T) (string, string) {
	return map[string]func(t *testing.T) (string, string){
		"file": func(t *testing.T) (string, string) {
			dir := t.TempDir()
			return "file://" + filepath.ToSlash(dir), dir
		},
		"s3": func(t *testing.T) (string, string) {
			url, _ := handovertest.S3(t)
			return url, ""
		},
	}
}

func sumReplayed(rs []Ready) (n int64) {
	for _, r := range rs {
		n += r.Replayed
	}
	return n
}

// TestHandoverMove moves partitions between instances with a handover
// store: a partition a newcomer takes is imported as the old owner
// exported it on revoke, with nothing to replay; a new machine imports
// the last exports and replays only the records processed after them
// (by an instance without handover); the output holds every distinct
// key exactly once across the moves.
func TestHandoverMove(t *testing.T) {
	for name, mk := range handoverStores(t) {
		t.Run(name, func(t *testing.T) {
			c := kafkatest.NewCluster(t, 2)
			addrs := c.ListenAddrs()
			url, _ := mk(t)
			store := handovertest.Open(t, url)
			t0 := time.Now()
			group := "gh-" + name
			withHandover := func(dir string) Options {
				cfg := testConfig(t, addrs, group)
				if dir != "" {
					cfg.StateDir = dir
				}
				cfg.Handover = store
				cfg.HandoverInterval = time.Hour // exports on revoke only
				return cfg
			}
			w1 := genInput("h", 2000, 1200, 50, t0)
			kafkatest.Produce(t, addrs, w1.recs...)
			dirA := t.TempDir()
			a := start(t, withHandover(dirA), nil)
			kafkatest.WaitCommitted(t, addrs, group, nil)

			b := start(t, withHandover(""), nil) // takes one partition from a
			waitReady(t, b, 1)
			rb := b.readies()[0]
			if rb.Imported != rb.Committed || rb.Imported <= 0 || rb.Replayed != 0 || rb.Fallback != "" {
				t.Errorf("moved partition: %+v, want it imported at its committed offset with nothing replayed", rb)
			}
			w2 := genInput("h", 1000, 1500, 50, t0.Add(3*time.Second)) // repeats and new keys
			kafkatest.Produce(t, addrs, w2.recs...)
			kafkatest.WaitCommitted(t, addrs, group, nil)
			a.stop(t) // exports on revoke
			b.stop(t)
			if st := b.c.HandoverStats(); st.Imports != 1 || st.Exports == 0 || st.ExportedBytes == 0 {
				t.Errorf("b's handover stats %+v", st)
			}

			// An instance without handover goes on; its work is not exported.
			plain := testConfig(t, addrs, group)
			plain.StateDir = dirA
			p := start(t, plain, nil)
			w3 := genInput("h", 700, 1900, 50, t0.Add(6*time.Second))
			kafkatest.Produce(t, addrs, w3.recs...)
			kafkatest.WaitCommitted(t, addrs, group, nil)
			p.stop(t)

			// A new machine: it imports the last exports and replays w3 only.
			d := start(t, withHandover(""), nil)
			waitReady(t, d, 2)
			rd := d.readies()
			for _, r := range rd {
				if r.Imported <= 0 || r.Imported >= r.Committed || r.From != r.Imported {
					t.Errorf("new machine: %+v, want an import behind the committed offset, replayed from it", r)
				}
			}
			if got, want := sumReplayed(rd), int64(len(w3.recs)); got != want {
				t.Errorf("new machine replayed %d records, want %d (w3 only)", got, want)
			}
			w4 := genInput("h", 1500, 2500, 50, t0.Add(9*time.Second))
			kafkatest.Produce(t, addrs, w4.recs...)
			kafkatest.WaitCommitted(t, addrs, group, nil)
			d.stop(t)
			checkExactlyOnce(t, addrs, w1, w2, w3, w4)
		})
	}
}

// TestHandoverFallbacks: an export that is missing, damaged, stale or of
// another window is not imported; the partition is rebuilt by replay as
// without handover, and the reason is reported and counted.
func TestHandoverFallbacks(t *testing.T) {
	c := kafkatest.NewCluster(t, 1)
	addrs := c.ListenAddrs()
	dir := t.TempDir()
	store := handovertest.Open(t, "file://"+filepath.ToSlash(dir))
	t0 := time.Now()
	in := genInput("f", 1500, 1000, 0, t0)
	kafkatest.Produce(t, addrs, in.recs...)

	var last HandoverStats // the stats of the last run
	run := func(group string, mod func(*Options)) Ready {
		t.Helper()
		cfg := testConfig(t, addrs, group)
		cfg.Handover = store
		cfg.HandoverInterval = time.Hour
		if mod != nil {
			mod(&cfg)
		}
		r := start(t, cfg, nil)
		waitReady(t, r, 1)
		kafkatest.WaitCommitted(t, addrs, group, nil)
		r.stop(t)
		last = r.c.HandoverStats()
		rd := r.readies()
		if len(rd) != 1 {
			t.Fatalf("readies %+v", rd)
		}
		return rd[0]
	}
	// The first run has no export: it rebuilds from nothing (C < 0).
	run("gf", nil)
	check := func(name, reason string, mod func(*Options)) {
		t.Helper()
		r := run("gf", func(cfg *Options) {
			if mod != nil {
				mod(cfg)
			}
			cfg.OnReady = nil
		})
		if r.Imported != -1 || r.Fallback != reason || r.Replayed != int64(len(in.recs)) {
			t.Errorf("%s: %+v, want fallback %q replaying all %d records", name, r, reason, len(in.recs))
		}
		// A fallback installs nothing: no import, no imported bytes.
		if last.Imports != 0 || last.ImportedBytes != 0 || last.Fallbacks[reason] != 1 {
			t.Errorf("%s: handover stats %+v, want one %q fallback and nothing imported", name, last, reason)
		}
	}
	// Sanity: the export is usable as it is.
	if r := run("gf", nil); r.Imported != int64(len(in.recs)) || r.Replayed != 0 {
		t.Fatalf("intact export: %+v", r)
	}
	check("no export", FallbackNone, func(cfg *Options) { cfg.Handover = handovertest.Open(t, "mem://") })

	// Damage every stored file but the largest: the newest export and
	// the older ones are damaged, and their fetch downloads that one
	// intact file before it finds the others damaged.
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(filepath.Dir(path)) != "files" || filepath.Ext(path) == ".attrs" {
			return err
		}
		files = append(files, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	size := func(path string) int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	slices.SortFunc(files, func(a, b string) int { return cmp.Compare(size(b), size(a)) })
	for _, path := range files[1:] {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			continue
		}
		b[len(b)/2] ^= 0x40
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check("damaged", FallbackDamaged, nil)
	// The damaged files were dropped from the store, and the run after
	// the damage exported its state whole again: it imports.
	if r := run("gf", nil); r.Imported != int64(len(in.recs)) || r.Replayed != 0 {
		t.Fatalf("export after the damage: %+v", r)
	}
	check("another window", FallbackIncompatible, func(cfg *Options) { cfg.Engine.Window = 2 * time.Hour })

	// Stale: the group's offset set back behind every export.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	stale := "gf-stale"
	run(stale, nil) // exports at the end
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: inTopic, Partition: 0, At: 500, LeaderEpoch: -1})
	if _, err := kadm.NewClient(cl).CommitOffsets(context.Background(), stale, offs); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, addrs, stale)
	cfg.Handover = store
	r := start(t, cfg, nil)
	waitReady(t, r, 1)
	r.stop(t)
	if rd := r.readies()[0]; rd.Fallback != FallbackStale || rd.Imported != -1 || rd.Replayed != 500 {
		t.Errorf("exports ahead of the group: %+v, want a stale fallback replaying 500", rd)
	}
	if st := r.c.HandoverStats(); st.Fallbacks[FallbackStale] != 1 {
		t.Errorf("stale fallback not counted: %+v", st)
	}
}

// TestHandoverScratchIsPrivate: StateDir/.handover, where exports are
// backed up and imports fetched, is 0700 whatever the umask, even if it
// was left open by an earlier run.
func TestHandoverScratchIsPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	c := &Consumer{cfg: Options{StateDir: t.TempDir()}}
	root := filepath.Join(c.cfg.StateDir, handoverDir)
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.scratch("import", tp{"in", 0}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != fsperm.DirMode {
		t.Fatalf("%s has mode %v, want %v", root, got, fsperm.DirMode)
	}
}

// TestHandoverBadCheckpointCounted: a partition whose checkpoint does not
// decode is not exported, and says so: the export failure is counted and
// logged with the partition, periodically and on revoke.
func TestHandoverBadCheckpointCounted(t *testing.T) {
	e, err := dedup.Open(dedup.Options{Dir: filepath.Join(t.TempDir(), "state"), ExpectedRate: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Commit([]byte("not a checkpoint")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs []string
	c := &Consumer{cfg: Options{
		StateDir:              t.TempDir(),
		Handover:              handovertest.Open(t, "mem://"),
		HandoverInterval:      time.Millisecond,
		HandoverRevokeTimeout: time.Second,
		Logf: func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			logs = append(logs, fmt.Sprintf(format, args...))
		},
	}}
	pt := &partition{tp: tp{"in", 7}, eng: e, ready: true}
	c.parts = map[tp]*partition{pt.tp: pt}
	c.exportDue()
	c.exportRevoked([]*partition{pt})
	c.exports.Wait()
	if got := c.HandoverStats().ExportFailures; got != 2 {
		t.Errorf("export failures %d, want 2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, l := range logs {
		if strings.Contains(l, "in-7") && strings.Contains(l, "checkpoint") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("logs %q: want 2 naming partition in-7 and its checkpoint", logs)
	}
}
