package dedup_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	. "github.com/streamdedup/dedup"
)

// TestBackupWhileCommitting takes a backup while another goroutine observes
// and commits, restores it into a new directory, and checks that every key
// committed before the backup began is Duplicate there and that its
// checkpoint is one that was committed.
func TestBackupWhileCommitting(t *testing.T) {
	forEachMode(t, func(t *testing.T, prob bool) {
		root := t.TempDir()
		o := Options{Dir: filepath.Join(root, "live"), Probabilistic: prob, Shards: 4}
		e := openT(t, o)
		var committed atomic.Int64 // keys 0..committed-1 are committed
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.Observe([]byte(fmt.Sprint("key", i))); err != nil {
					t.Error(err)
					return
				}
				if i%20 == 19 {
					if err := e.Commit([]byte(strconv.Itoa(i + 1))); err != nil {
						t.Error(err)
						return
					}
					committed.Store(int64(i + 1))
				}
			}
		}()
		for committed.Load() < 2000 {
			runtime.Gosched()
		}
		before := committed.Load()
		if err := e.Backup(filepath.Join(root, "backup")); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		after := committed.Load()
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}

		if _, err := RestoreBackup(filepath.Join(root, "backup"), o.Dir); err == nil || !strings.Contains(err.Error(), "not empty") {
			t.Fatalf("restore over a live state: %v", err)
		}
		dst := filepath.Join(root, "restored")
		ro, err := RestoreBackup(filepath.Join(root, "backup"), dst)
		if err != nil {
			t.Fatal(err)
		}
		r := openT(t, ro)
		if st := r.Stats(); st.RestoredFrom != RestoredSnapshot {
			t.Fatalf("restored state opened from %q", st.RestoredFrom)
		}
		cp, err := strconv.Atoi(string(r.Checkpoint()))
		if err != nil || int64(cp) < before || int64(cp) > after || cp%20 != 0 {
			t.Fatalf("checkpoint %q not one committed in [%d, %d]", r.Checkpoint(), before, after)
		}
		for i := 0; i < cp; i++ {
			mustObserve(t, r, fmt.Sprint("key", i), Duplicate)
		}
	})
}

// TestRestoreLoneSnapshot installs a probabilistic state from its snapshot
// folder alone.
func TestRestoreLoneSnapshot(t *testing.T) {
	root := t.TempDir()
	o := Options{Dir: filepath.Join(root, "live"), Probabilistic: true}
	e := openT(t, o)
	for i := 0; i < 500; i++ {
		mustObserve(t, e, fmt.Sprint(i), New)
	}
	mustCommit(t, e, "x")
	if err := e.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := RestoreBackup(filepath.Join(o.Dir, SnapshotDir), filepath.Join(root, "new"))
	if err != nil {
		t.Fatal(err)
	}
	r := openT(t, ro)
	for i := 0; i < 500; i++ {
		mustObserve(t, r, fmt.Sprint(i), Duplicate)
	}
	// An exact state cannot be restored from a snapshot alone.
	x := Options{Dir: filepath.Join(root, "exact")}
	ex := openT(t, x)
	mustObserve(t, ex, "a", New)
	mustCommit(t, ex, "")
	if err := ex.Snapshot(); err != nil {
		t.Fatal(err)
	}
	_ = ex.Close()
	if _, err := RestoreBackup(filepath.Join(x.Dir, SnapshotDir), filepath.Join(root, "new2")); err == nil {
		t.Fatal("restored an exact state from a lone snapshot")
	}
	if _, err := RestoreBackup(filepath.Join(root, "nothing"), filepath.Join(root, "new3")); err == nil {
		t.Fatal("restored from a missing folder")
	}
}

func TestRebuildSnapshot(t *testing.T) {
	dir := t.TempDir()
	e := openT(t, Options{Dir: dir, Shards: 2})
	for i := 0; i < 300; i++ {
		mustObserve(t, e, fmt.Sprint(i), New)
	}
	mustCommit(t, e, "cp")
	_ = e.Close()
	st, err := RebuildSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.RestoredFrom != RestoredStore || st.RestoredKeys != 300 || st.Snapshots != 1 {
		t.Fatalf("rebuild stats: from %q, %d keys, %d snapshots", st.RestoredFrom, st.RestoredKeys, st.Snapshots)
	}
	o, err := StateOptions(dir)
	if err != nil {
		t.Fatal(err)
	}
	if o.Shards != 2 || o.Filter != "blocked" {
		t.Fatalf("StateOptions = %+v", o)
	}
	e2 := openT(t, o)
	if e2.Stats().RestoredFrom != RestoredSnapshot {
		t.Fatal("the rebuilt snapshot was not used")
	}
	mustObserve(t, e2, "7", Duplicate)
}
