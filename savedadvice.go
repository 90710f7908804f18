package dedup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/fsperm"
)

// SavedAdviceFile is the file of a state directory that keeps the last
// window advice measured ([Stats.SavedWindowAdvice]), so that a tool that
// opens the state without observing anything (dedup stats) can show it.
const SavedAdviceFile = "window-advice.json"

// SavedWindowAdvice is the last window advice an engine measured on its
// traffic ([Stats.WindowAdvice] with duplicates counted), kept with the
// state: a later Open reports it in [Stats.SavedWindowAdvice].
type SavedWindowAdvice struct {
	// MeasuredAt is the wall-clock time of the Stats call that measured
	// it.
	MeasuredAt time.Time `json:"measured_at"`
	// Advice is the advice measured then.
	Advice WindowAdvice `json:"advice"`
	// AutoWindow is the state of the self-sizing window then, nil for an
	// engine without [Options.AutoWindow].
	AutoWindow *AutoWindowStats `json:"auto_window,omitempty"`
}

// savedAdvice is the engine's last advice measured, and whether it is
// written to the state directory yet.
type savedAdvice struct {
	mu     sync.Mutex
	loaded bool // the state directory's file was read
	last   *SavedWindowAdvice
}

// noteAdvice keeps a, just measured by Stats, as the last advice (if it
// rests on any duplicate) and writes it to the state directory; it
// returns the last advice measured, by this engine or one before on the
// same state, nil if none. An advice that cannot be written is reported
// through Options.Logf: the state is whole without it.
func (e *Engine) noteAdvice(a WindowAdvice) *SavedWindowAdvice {
	var auto *AutoWindowStats
	if e.auto != nil {
		st := e.autoStats()
		auto = &st
	}
	sa := &e.saved
	sa.mu.Lock()
	defer sa.mu.Unlock()
	fs := e.opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	fs = fsperm.FS(fs) // 0600, as every file of the state
	if !sa.loaded {
		sa.loaded = true
		if e.opts.Dir != "" {
			last, err := readSavedAdvice(fs, fs.PathJoin(e.opts.Dir, SavedAdviceFile))
			if err != nil {
				e.logf("window advice saved in %s: %v", e.opts.Dir, err)
			}
			sa.last = last
		}
	}
	if a.Caught+a.HorizonMatches+a.Late > 0 {
		sa.last = &SavedWindowAdvice{MeasuredAt: time.Now(), Advice: a, AutoWindow: auto}
		if e.opts.Dir != "" {
			if err := writeSavedAdvice(fs, e.opts.Dir, sa.last); err != nil {
				e.logf("saving the window advice in %s: %v", e.opts.Dir, err)
			}
		}
	}
	if sa.last == nil {
		return nil
	}
	c := *sa.last
	if c.AutoWindow != nil {
		aw := *c.AutoWindow
		c.AutoWindow = &aw
	}
	return &c
}

func readSavedAdvice(fs vfs.FS, path string) (*SavedWindowAdvice, error) {
	f, err := fs.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	var s SavedWindowAdvice
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, SavedAdviceFile, err)
	}
	return &s, nil
}

// writeSavedAdvice writes s to dir atomically: a temporary file, fsynced,
// renamed over the last one.
func writeSavedAdvice(fs vfs.FS, dir string, s *SavedWindowAdvice) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := fs.PathJoin(dir, SavedAdviceFile+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	return fs.Rename(tmp, fs.PathJoin(dir, SavedAdviceFile))
}
