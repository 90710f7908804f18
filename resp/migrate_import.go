package resp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/handover"
	"github.com/streamdedup/dedup/internal/fsperm"
)

// beginImport makes this node import START-END from source: an import
// table serves the keys the source sends here with -ASK. It answers OK
// also when the import is under way already (a source resuming a move),
// and OWNED when the range is this node's already (the move finished
// here).
func (cl *cluster) beginImport(start, end int, source string) (string, error) {
	s := cl.s
	if s.cfg.Dir == "" || cl.opts.Handover == "" {
		return "", errors.New("importing a range needs a state directory and a handover store (--state, --cluster-handover)")
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	r, err := cl.mapRange(start, end)
	if err != nil {
		return "", err
	}
	if rg := cl.ranges[start]; rg != nil {
		rg.mu.RLock()
		state, peer := rg.state, rg.peer
		rg.mu.RUnlock()
		switch {
		case state == rangeImporting && peer == source:
			return "OK", nil
		case state == rangeOwned && r.Node == cl.me:
			return "OWNED", nil
		}
		return "", fmt.Errorf("slots %d-%d are on this node already, or moving here", start, end)
	}
	if r.Node != source {
		return "", fmt.Errorf("slots %d-%d belong to %s, not to %s, in this node's map", start, end, r.Node, source)
	}
	name := importTableName(start, end)
	// What an import that never began (its source file unwritten) or was
	// aborted left behind is stale.
	if err := os.RemoveAll(filepath.Join(s.cfg.Dir, name)); err != nil {
		return "", err
	}
	rg, err := s.openImport(start, end, source)
	if err != nil {
		return "", err
	}
	cl.ranges[start] = rg
	return "OK", nil
}

// openImport opens the import of START-END from source: its table, its
// source file (written if missing) and its key log.
func (s *Server) openImport(start, end int, source string) (*slotRange, error) {
	name := importTableName(start, end)
	dir := filepath.Join(s.cfg.Dir, name)
	fresh, err := s.openTable(name, s.defaultTableOptions())
	if err != nil {
		return nil, err
	}
	src := filepath.Join(dir, importSourceFile)
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		if err = writeSync(src+".tmp", []byte(source+"\n")); err == nil {
			if err = os.Rename(src+".tmp", src); err == nil {
				err = syncDir(dir)
			}
		}
		if err != nil {
			return nil, errors.Join(err, fresh.close(false))
		}
	}
	log, n, err := openImportLog(dir)
	if err != nil {
		return nil, errors.Join(err, fresh.close(false))
	}
	return &slotRange{start: start, end: end, state: rangeImporting, peer: source, fresh: fresh, log: log, logged: n}, nil
}

// closeImport closes an import's table and log and removes them.
func (s *Server) closeImport(rg *slotRange) error {
	var errs []error
	if rg.log != nil {
		errs = append(errs, rg.log.Close())
		rg.log = nil
	}
	if rg.fresh != nil {
		rg.fresh.handedOver.Store(true)
		errs = append(errs, rg.fresh.close(false), os.RemoveAll(filepath.Join(s.cfg.Dir, rg.fresh.name)))
		rg.fresh = nil
	}
	return errors.Join(errs...)
}

// abortImport drops an import that did not finish.
func (cl *cluster) abortImport(start, end int) error {
	cl.mu.Lock()
	rg := cl.ranges[start]
	if rg == nil || rg.state != rangeImporting {
		cl.mu.Unlock()
		return fmt.Errorf("slots %d-%d are not being imported here", start, end)
	}
	delete(cl.ranges, start)
	cl.mu.Unlock()
	rg.mu.Lock()
	defer rg.mu.Unlock()
	rg.state = rangeGone
	return cl.s.closeImport(rg)
}

// finishImport installs the export epoch of START-END, replays into it
// the keys the import table was sent, and owns the range. It answers OK
// at once when the range is this node's already (a repeated FINISH).
func (cl *cluster) finishImport(start, end int, epoch int64) error {
	s := cl.s
	cl.mu.RLock()
	rg := cl.ranges[start]
	owned := rg != nil && cl.m.owner(start) == cl.me
	cl.mu.RUnlock()
	if owned && rg.end == end {
		rg.mu.RLock()
		st := rg.state
		rg.mu.RUnlock()
		if st == rangeOwned {
			return nil
		}
	}
	if rg == nil || rg.state != rangeImporting || rg.end != end {
		return fmt.Errorf("slots %d-%d are not being imported here", start, end)
	}
	ctx := context.Background()
	st, err := handover.Open(ctx, cl.opts.Handover)
	if err != nil {
		return err
	}
	defer st.Close()
	ms, err := st.Latest(ctx, movePartition(start, end), epoch, 1)
	if err != nil {
		return err
	}
	m := ms[0]
	if m.Offset != epoch || m.Format != moveFormat {
		return fmt.Errorf("%w: the newest export of slots %d-%d is epoch %d format %q, want epoch %d format %q",
			handover.ErrDamaged, start, end, m.Offset, m.Format, epoch, moveFormat)
	}
	tmp, err := os.MkdirTemp(s.cfg.Dir, ".import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	got := filepath.Join(tmp, "export")
	if _, err := st.Fetch(ctx, m, got); err != nil {
		return err
	}
	ents, err := os.ReadDir(got)
	if err != nil {
		return err
	}
	rangeName := rangeTableName(start, end)
	for _, e := range ents {
		name := e.Name()
		if name != rangeName && !validTableName(name) {
			return fmt.Errorf("%w: export of slots %d-%d holds %q, not a table", handover.ErrDamaged, start, end, name)
		}
		// Named tables open from disk on their first command.
		if err := s.installTable(filepath.Join(got, name), name); err != nil {
			return fmt.Errorf("table %q: %w", name, err)
		}
	}
	opts, ok, err := ReadTableOptions(s.cfg.Dir, rangeName)
	if err == nil && !ok {
		err = fmt.Errorf("%w: export of slots %d-%d has no %s", handover.ErrDamaged, start, end, rangeName)
	}
	if err != nil {
		return err
	}
	t, err := s.openTable(rangeName, opts)
	if err != nil {
		return err
	}
	newMap, err := cl.withOwner(start, end, cl.announce(), epoch)
	if err != nil {
		return errors.Join(err, t.close(false))
	}
	// Hold the range alone: no key is sent to the import table while its
	// keys are replayed, and none marked in t before the map saying the
	// range is here is durable (a restart before that installs again).
	rg.mu.Lock()
	keys, _, err := readImportLog(filepath.Join(s.cfg.Dir, rg.fresh.name, importLogFile))
	if err == nil {
		err = replay(t, keys)
	}
	if err == nil {
		hook("installed")
		err = cl.saveMap(newMap)
	}
	if err != nil {
		rg.mu.Unlock()
		return errors.Join(err, t.close(false))
	}
	imp := &slotRange{fresh: rg.fresh, log: rg.log}
	rg.t, rg.fresh, rg.log, rg.state, rg.peer = t, nil, nil, rangeOwned, ""
	rg.mu.Unlock()
	cl.mu.Lock()
	if newMap.Epoch >= cl.m.Epoch {
		cl.m = newMap
	}
	cl.mu.Unlock()
	if err := s.closeImport(imp); err != nil {
		s.logf("resp: slots %d-%d imported; removing the import table: %v", start, end, err)
	}
	return nil
}

// replay marks keys, answered New by an import table, in t and commits.
func replay(t *table, keys [][]byte) error {
	const batch = 4096
	out := make([]dedup.Verdict, batch)
	for len(keys) > 0 {
		n := min(len(keys), batch)
		if err := t.observe(keys[:n], out[:n]); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return t.commit(nil)
}

// installTable installs an exported table (table.json and an engine
// backup) as the table name under the state root, replacing what a move
// that did not finish may have left there.
func (s *Server) installTable(src, name string) error {
	dst := filepath.Join(s.cfg.Dir, name)
	s.tmu.RLock()
	open := s.tables[name] != nil
	s.tmu.RUnlock()
	if open {
		return fmt.Errorf("a table %q is open on this node already", name)
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := fsperm.MkdirAll(dst); err != nil {
		return err
	}
	if _, err := dedup.RestoreBackup(filepath.Join(src, engineDir), filepath.Join(dst, engineDir)); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(src, tableFile))
	if err != nil {
		return err
	}
	tmp := filepath.Join(dst, tableFile+".tmp")
	if err := writeSync(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dst, tableFile)); err != nil {
		return err
	}
	return syncDir(dst)
}
