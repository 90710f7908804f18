package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/handover"
	"github.com/streamdedup/dedup/internal/fsperm"
)

// Fallback reasons: why a partition without current local state was
// rebuilt by replay although [Options.Handover] is set ([Ready.Fallback],
// [HandoverStats.Fallbacks]).
const (
	FallbackNone         = "none"         // the store holds no export of the partition
	FallbackStale        = "stale"        // every export is ahead of the group's offset, or older than the window
	FallbackDamaged      = "damaged"      // the export failed verification or did not restore
	FallbackIncompatible = "incompatible" // the export has another window or state format
	FallbackError        = "error"        // the store could not be read (or the import timed out)
)

// FallbackReasons lists the fallback reasons, for metrics.
var FallbackReasons = []string{FallbackNone, FallbackStale, FallbackDamaged, FallbackIncompatible, FallbackError}

// HandoverStats counts the exports and imports of partition state through
// [Options.Handover]; see [Consumer.HandoverStats].
type HandoverStats struct {
	Exports        uint64            // exports written
	ExportFailures uint64            // exports that failed (or ran out of time)
	ExportedBytes  uint64            // bytes uploaded (files already stored excluded)
	ExportTime     time.Duration     // time spent exporting, backups included
	Imports        uint64            // partitions made ready from an export
	ImportedBytes  uint64            // bytes of the imports installed (not of damaged ones)
	ImportTime     time.Duration     // time spent importing, restores included
	Fallbacks      map[string]uint64 // replays instead of an import, by reason
}

type handoverCounters struct {
	exports, exportFailures, exportedBytes, exportNanos atomic.Uint64
	imports, importedBytes, importNanos                 atomic.Uint64
	fallbacks                                           [5]atomic.Uint64 // by FallbackReasons index
}

// HandoverStats returns the handover counters; it is safe to call while
// [Consumer.Run] runs.
func (c *Consumer) HandoverStats() HandoverStats {
	h := &c.handover
	st := HandoverStats{
		Exports:        h.exports.Load(),
		ExportFailures: h.exportFailures.Load(),
		ExportedBytes:  h.exportedBytes.Load(),
		ExportTime:     time.Duration(h.exportNanos.Load()),
		Imports:        h.imports.Load(),
		ImportedBytes:  h.importedBytes.Load(),
		ImportTime:     time.Duration(h.importNanos.Load()),
		Fallbacks:      make(map[string]uint64, len(FallbackReasons)),
	}
	for i, r := range FallbackReasons {
		st.Fallbacks[r] = h.fallbacks[i].Load()
	}
	return st
}

func (c *Consumer) fallback(t tp, reason string, err error) string {
	for i, r := range FallbackReasons {
		if r == reason {
			c.handover.fallbacks[i].Add(1)
		}
	}
	c.logf("kafka: %s: no handover import (%s: %v); replaying instead", t, reason, err)
	return reason
}

// handoverPart names t in the store.
func (c *Consumer) handoverPart(t tp) handover.Partition {
	return handover.Partition{Group: c.cfg.Group, Topic: t.topic, Partition: t.part}
}

// stateFormat names the format of the states this consumer's engines
// write; an export of another format is not imported.
func (c *Consumer) stateFormat() string {
	mode := "exact"
	if c.engine.Probabilistic {
		mode = "probabilistic"
	}
	return "dedup-backup/" + mode
}

// scratch returns a new path under StateDir/.handover for a temporary
// directory (not created). StateDir/.handover is private like the state
// (what it holds is states, with their fingerprint secrets).
func (c *Consumer) scratch(kind string, t tp) (string, error) {
	root := filepath.Join(c.cfg.StateDir, handoverDir)
	if err := os.MkdirAll(root, fsperm.DirMode); err != nil {
		return "", err
	}
	if err := os.Chmod(root, fsperm.DirMode); err != nil {
		return "", err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return filepath.Join(root, kind+"-"+t.String()+"-"+hex.EncodeToString(b[:])), nil
}

// handoverDir, under StateDir, holds the backups being exported and the
// exports being imported; what a crash leaves there is removed at start.
const handoverDir = ".handover"

// cleanScratch removes what an earlier run left in StateDir/.handover.
func (c *Consumer) cleanScratch() {
	if c.cfg.Handover == nil {
		return
	}
	if err := os.RemoveAll(filepath.Join(c.cfg.StateDir, handoverDir)); err != nil {
		c.logf("kafka: remove handover scratch: %v", err)
	}
}

// backup writes pt's state to a new scratch directory and returns it with
// the offset it covers. The caller makes sure no commit of pt's engine
// runs and nothing is staged: the engine's checkpoint is the backup's.
func (c *Consumer) backup(pt *partition) (string, int64, error) {
	cp, ok, err := decodeCheckpoint(pt.eng.Checkpoint())
	if err != nil || !ok {
		return "", -1, err
	}
	dir, err := c.scratch("export", pt.tp)
	if err != nil {
		return "", -1, err
	}
	// A scratch copy, uploaded and removed: links (where the file system
	// allows) spare copying the store only to read it once.
	if err := pt.eng.BackupWith(dir, dedup.BackupOptions{Link: true}); err != nil {
		os.RemoveAll(dir)
		return "", -1, err
	}
	return dir, cp.Offset, nil
}

// upload exports the backup dir of pt at offset off, removes dir and
// prunes the partition's old exports.
func (c *Consumer) upload(ctx context.Context, pt *partition, dir string, off int64, began time.Time) error {
	defer os.RemoveAll(dir)
	c.logf("kafka: %s exporting at offset %d", pt.tp, off)
	st := c.cfg.Handover
	m, es, err := st.Export(ctx, c.handoverPart(pt.tp), dir, handover.Manifest{Offset: off, Window: c.engine.Window, Format: c.stateFormat()}, &pt.hasher)
	c.handover.exportNanos.Add(uint64(time.Since(began)))
	c.handover.exportedBytes.Add(uint64(es.Sent))
	if err != nil {
		c.handover.exportFailures.Add(1)
		return err
	}
	c.handover.exports.Add(1)
	for {
		prev := pt.exported.Load()
		if off <= prev || pt.exported.CompareAndSwap(prev, off) {
			break
		}
	}
	c.logf("kafka: %s exported at offset %d (generation %d): %d files, %d of %d bytes uploaded in %v", pt.tp, off, m.Generation, es.Files, es.Sent, es.Bytes, time.Since(began).Round(time.Millisecond))
	if err := st.Prune(ctx, c.handoverPart(pt.tp)); err != nil {
		c.logf("kafka: %s: prune old exports: %v", pt.tp, err)
	}
	return nil
}

// exportDue starts the periodic export of one ready partition whose last
// export is HandoverInterval old and whose state has moved since: its
// backup is taken here, between transactions, and uploaded beside the
// loop.
func (c *Consumer) exportDue() {
	if c.cfg.Handover == nil || time.Now().Before(c.nextExportScan) {
		return
	}
	c.nextExportScan = time.Now().Add(min(time.Second, c.cfg.HandoverInterval/4))
	var due *partition
	c.mu.Lock()
	for _, pt := range c.parts {
		if pt.ready && !pt.uploading.Load() && time.Since(pt.lastExport) >= c.cfg.HandoverInterval {
			if due == nil || pt.lastExport.Before(due.lastExport) {
				due = pt
			}
		}
	}
	c.mu.Unlock()
	if due == nil {
		return
	}
	due.lastExport = time.Now()
	cp, ok, err := decodeCheckpoint(due.eng.Checkpoint())
	if err != nil {
		c.handover.exportFailures.Add(1)
		c.logf("kafka: %s: export: %v", due.tp, err)
		return
	}
	if !ok || (cp.Offset <= due.exported.Load() && !due.dirty) {
		return // nothing new since the last export
	}
	// Commit the keys of committed transactions first, so that the
	// checkpoint read is the backup's.
	if err := c.commitRound(true); err != nil {
		c.commitErr.CompareAndSwap(nil, &err)
		return
	}
	began := time.Now()
	dir, off, err := c.backup(due)
	if err != nil || dir == "" {
		c.handover.exportFailures.Add(1)
		c.logf("kafka: %s: backup for export: %v", due.tp, err)
		return
	}
	if off <= due.exported.Load() {
		os.RemoveAll(dir)
		return
	}
	due.uploading.Store(true)
	c.exports.Add(1)
	go func() {
		defer c.exports.Done()
		defer due.uploading.Store(false)
		if err := c.upload(c.exportCtx, due, dir, off, began); err != nil {
			c.logf("kafka: %s: export: %v", due.tp, err)
		}
	}()
}

// exportRevoked exports the revoked partitions' states, in parallel,
// within HandoverRevokeTimeout (and within the shutdown's deadline when
// the consumer is shutting down), so that the rebalance is not held up
// longer. The engines have committed (the loop is between transactions).
func (c *Consumer) exportRevoked(parts []*partition) {
	if c.cfg.Handover == nil || len(parts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.HandoverRevokeTimeout)
	defer cancel()
	if c.closeCtx != nil {
		defer context.AfterFunc(c.closeCtx, cancel)()
	}
	// Each partition's backup and upload run beside the others': the
	// engines are separate, and the revoke waits for the slowest alone.
	var wg sync.WaitGroup
	for _, pt := range parts {
		cp, ok, err := decodeCheckpoint(pt.eng.Checkpoint())
		if err != nil {
			c.handover.exportFailures.Add(1)
			c.logf("kafka: %s: export on revoke: %v", pt.tp, err)
			continue
		}
		if !ok || cp.Offset <= pt.exported.Load() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			dir, off, err := c.backup(pt)
			if err != nil || dir == "" {
				c.handover.exportFailures.Add(1)
				c.logf("kafka: %s: backup for export on revoke: %v", pt.tp, err)
				return
			}
			if err := c.upload(ctx, pt, dir, off, began); err != nil {
				c.logf("kafka: %s: export on revoke: %v", pt.tp, err)
			}
		}()
	}
	wg.Wait()
}

// errNotUsable marks an export passed over without a fallback: the local
// state is as new.
var errNotUsable = errors.New("kafka: local state as new as the export")

// tryImport replaces pt's state, not current, with the newest usable
// export at or before the committed offset C and newer than the local
// checkpoint (local, -1 for none), when there is one; ws is where the
// window before C begins. It returns the partition to go on with (pt, or
// its reopened successor), the offset imported (-1 for none) and the
// fallback reason ("" for none).
func (c *Consumer) tryImport(ctx context.Context, pt *partition, C, local int64, ws *windowStart) (*partition, int64, string, error) {
	began := time.Now()
	pt.importing.Store(true)
	defer pt.importing.Store(false)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.HandoverImportTimeout)
	defer cancel()
	t := pt.tp
	ms, err := c.cfg.Handover.Latest(ctx, c.handoverPart(t), C, 3)
	switch {
	case errors.Is(err, handover.ErrNotFound):
		return pt, -1, c.fallback(t, FallbackNone, err), nil
	case errors.Is(err, handover.ErrStale):
		return pt, -1, c.fallback(t, FallbackStale, err), nil
	case errors.Is(err, handover.ErrDamaged):
		return pt, -1, c.fallback(t, FallbackDamaged, err), nil
	case err != nil:
		return pt, -1, c.fallback(t, FallbackError, err), nil
	}
	from, err := ws.get(ctx)
	if err != nil {
		return pt, -1, "", err
	}
	reason, first := "", error(nil)
	note := func(r string, err error) {
		if first == nil {
			reason, first = r, err
		}
	}
	for _, m := range ms {
		switch {
		case m.Offset <= local:
			note("", errNotUsable)
		case m.Offset < from:
			note(FallbackStale, fmt.Errorf("export at offset %d is older than the window, which begins at %d", m.Offset, from))
		case m.Window != c.engine.Window || m.Format != c.stateFormat():
			note(FallbackIncompatible, fmt.Errorf("export with window %v, format %q; want %v, %q", m.Window, m.Format, c.engine.Window, c.stateFormat()))
		default:
			npt, err := c.install(ctx, pt, m)
			if npt == nil {
				return nil, -1, "", err // the state directory cannot be changed: permanent
			}
			if npt != pt {
				local = -1 // the local state was replaced
			}
			pt = npt
			if err == nil {
				c.handover.imports.Add(1)
				c.handover.importNanos.Add(uint64(time.Since(began)))
				c.logf("kafka: %s: imported the export at offset %d (generation %d, %d bytes) in %v", t, m.Offset, m.Generation, m.Bytes(), time.Since(began).Round(time.Millisecond))
				return npt, m.Offset, "", nil
			}
			switch {
			case ctx.Err() != nil:
				note(FallbackError, err)
			case errors.Is(err, handover.ErrDamaged) || errors.Is(err, dedup.ErrCorrupt):
				note(FallbackDamaged, err)
			case errors.Is(err, dedup.ErrIncompatible):
				note(FallbackIncompatible, err)
			default:
				note(FallbackError, err)
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	if errors.Is(first, errNotUsable) {
		c.logf("kafka: %s: local state at offset %d is as new as the newest export; replaying from it", t, local)
		return pt, -1, "", nil
	}
	return pt, -1, c.fallback(t, reason, first), nil
}

// install fetches m and puts it in place of pt's state, which it closes.
// Fetch has checked every file against the manifest's size and checksum,
// so the fetched backup becomes the state as it is, neither copied nor
// opened twice: opening it as the partition's state is the check that it
// restores at m's offset. It returns the partition to go on with: pt
// itself when the export failed before the swap, the imported state, or,
// when the import does not open with this consumer's options at m's
// offset, a new empty state; nil with a permanent error when the state
// directory cannot be changed.
func (c *Consumer) install(ctx context.Context, pt *partition, m *handover.Manifest) (*partition, error) {
	work, err := c.scratch("import", pt.tp)
	if err != nil {
		return pt, err
	}
	defer os.RemoveAll(work)
	state := filepath.Join(work, "state")
	c.logf("kafka: %s importing the export at offset %d (generation %d, %d bytes)", pt.tp, m.Offset, m.Generation, m.Bytes())
	began := time.Now()
	n, err := c.cfg.Handover.Fetch(ctx, m, state)
	if err != nil {
		return pt, err
	}
	if _, err := os.Stat(filepath.Join(state, dedup.SnapshotDir)); err != nil {
		return pt, fmt.Errorf("%w: export at offset %d holds no snapshot: %w", handover.ErrDamaged, m.Offset, err)
	}
	fetched := time.Since(began)
	// Swap: the old state moves aside (one rename), the import takes its
	// place (another). A crash between the two leaves no state, which the
	// next assignment rebuilds or imports.
	c.mu.Lock()
	delete(c.parts, pt.tp)
	c.mu.Unlock()
	if err := pt.eng.Close(); err != nil {
		c.logf("kafka: close %s before the import: %v", pt.tp, err)
	}
	old := filepath.Join(work, "old")
	if err := os.Rename(c.dir(pt.tp), old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, c.permanent(fmt.Errorf("kafka: move aside the state of %s: %w", pt.tp, err))
	}
	if err := os.Rename(state, c.dir(pt.tp)); err != nil {
		return nil, c.permanent(fmt.Errorf("kafka: install the import of %s: %w", pt.tp, err))
	}
	opened := time.Now()
	npt, err := c.openState(pt.tp)
	if err == nil {
		cp, ok, cpErr := decodeCheckpoint(npt.eng.Checkpoint())
		if cpErr == nil && ok && cp.Offset == m.Offset {
			st := npt.eng.Stats()
			if st.RestoredFrom != dedup.RestoredSnapshot {
				// Still the export's keys, rebuilt from its store: slower.
				c.logf("kafka: %s: the export's snapshot did not load (%v); its filters were rebuilt from its store", pt.tp, st.RestoreProblems)
			}
			c.logf("kafka: %s: export fetched and verified in %v, opened in %v", pt.tp, fetched.Round(time.Millisecond), time.Since(opened).Round(time.Millisecond))
			npt.exported.Store(m.Offset)
			c.register(npt)
			c.handover.importedBytes.Add(uint64(n)) // installed imports only
			return npt, nil
		}
		err = fmt.Errorf("%w: export at offset %d restores checkpoint %d (%v)", handover.ErrDamaged, m.Offset, cp.Offset, cpErr)
		if cerr := npt.eng.Close(); cerr != nil {
			c.logf("kafka: close %s: %v", pt.tp, cerr)
		}
	}
	// It does not open as this consumer's state: start empty.
	if rerr := os.RemoveAll(c.dir(pt.tp)); rerr != nil {
		return nil, c.permanent(fmt.Errorf("kafka: remove the import of %s: %w", pt.tp, rerr))
	}
	npt, oerr := c.open(pt.tp)
	if oerr != nil {
		return nil, oerr
	}
	return npt, err
}
