package dedup_test

import (
	"path/filepath"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/testclock"
)

// TestAutoWindowKeptByBackup checks that a backup keeps the window an
// AutoWindow sized and the saved window advice: restored and reopened, the
// window in force is the widened one, a key held under it is still held
// past Min, and Stats.SavedWindowAdvice is the one measured before.
func TestAutoWindowKeptByBackup(t *testing.T) {
	dir := t.TempDir()
	clock := testclock.New(t0)
	auto := &AutoWindow{MaxLeaks: 100, Min: 2 * time.Minute, Max: 30 * time.Minute}
	o := Options{Dir: dir, Now: clock.Now, ExpectedRate: 1000, AutoWindow: auto}
	e := openT(t, o)
	if changed, err := e.SetWindowAt(20*time.Minute, clock.Now()); err != nil || !changed {
		t.Fatalf("SetWindowAt = %v, %v", changed, err)
	}
	mustObserve(t, e, "wide", New)
	mustCommit(t, e, "a")
	mustObserve(t, e, "wide", Duplicate)
	saved := e.Stats().SavedWindowAdvice
	if saved == nil || saved.AutoWindow == nil {
		t.Fatalf("SavedWindowAdvice = %+v, want one with its AutoWindow", saved)
	}
	backup := filepath.Join(t.TempDir(), "backup")
	if err := e.Backup(backup); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	ro, err := RestoreBackup(backup, restored)
	if err != nil {
		t.Fatal(err)
	}
	ro.Now, ro.ExpectedRate, ro.AutoWindow = clock.Now, 1000, auto
	r := openT(t, ro)
	if w := r.Window(); w != 20*time.Minute {
		t.Errorf("restored Window = %v, want the widened 20m", w)
	}
	got := r.Stats().SavedWindowAdvice
	if got == nil {
		t.Fatal("restored SavedWindowAdvice = nil, want the advice measured before the backup")
	}
	if !got.MeasuredAt.Equal(saved.MeasuredAt) || got.Advice.Caught != saved.Advice.Caught {
		t.Errorf("restored SavedWindowAdvice = %+v, want %+v", got, saved)
	}
	if got.AutoWindow == nil || got.AutoWindow.Window != 20*time.Minute {
		t.Errorf("restored SavedWindowAdvice.AutoWindow = %+v, want the 20m window", got.AutoWindow)
	}
	clock.Advance(10 * time.Minute) // past Min's 2m, within 20m
	mustObserve(t, r, "wide", Duplicate)
	mustObserve(t, r, "new", New)
	mustCommit(t, r, "b")
	r = reopen(t, r, ro)
	if w := r.Window(); w != 20*time.Minute {
		t.Errorf("reopened Window = %v, want 20m", w)
	}
	clock.Advance(5 * time.Minute)
	mustObserve(t, r, "wide", Duplicate)
}

// TestAutoWindowKeptByLoneSnapshot checks that a probabilistic state
// restored from a lone snapshot folder keeps the window an AutoWindow
// sized: the snapshot holds the schedule.
func TestAutoWindowKeptByLoneSnapshot(t *testing.T) {
	dir := t.TempDir()
	clock := testclock.New(time.Now()) // the restore checks it on the wall clock
	auto := &AutoWindow{MaxLeaks: 100, Min: 2 * time.Minute, Max: 30 * time.Minute}
	o := Options{Dir: dir, Now: clock.Now, ExpectedRate: 1000, AutoWindow: auto, Probabilistic: true}
	e := openT(t, o)
	if changed, err := e.SetWindowAt(20*time.Minute, clock.Now()); err != nil || !changed {
		t.Fatalf("SetWindowAt = %v, %v", changed, err)
	}
	mustObserve(t, e, "wide", New)
	mustCommit(t, e, "a")
	if err := e.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	ro, err := RestoreBackup(filepath.Join(dir, SnapshotDir), restored)
	if err != nil {
		t.Fatal(err)
	}
	ro.Now, ro.ExpectedRate, ro.AutoWindow = clock.Now, 1000, auto
	r := openT(t, ro)
	if w := r.Window(); w != 20*time.Minute {
		t.Errorf("restored Window = %v, want the widened 20m", w)
	}
	clock.Advance(10 * time.Minute) // past Min's 2m, within 20m
	mustObserve(t, r, "wide", Duplicate)
}
