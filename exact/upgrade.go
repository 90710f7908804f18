package exact

// Upgrading a store of format 1 or 2 to format 3, when it is opened: the
// keys it holds (format 1 under tagKey, format 2 under tagFlushKey with
// their filters under tagFilter) are rewritten as fingerprint tables, and
// the commit log's records of format 2, which hold keys, are replayed into
// fingerprints by the replay that follows (see Store.apply).
//
// The steps, each crash-safe:
//
//  1. Leftovers of an upgrade a crash interrupted (fingerprint tables and
//     filters, which a store of format 1 or 2 never holds otherwise) are
//     excised.
//  2. Every key of a live generation is read, per generation and flush
//     (the keys of format 1 take flush number 0, which no flush has), and
//     written as a sorted table of fingerprints with its filter; all of
//     them are ingested in one atomic step.
//  3. One synced batch rewrites the marker to 3, sets upgradingKey to the
//     old format, and deletes the ranges of keys and filters of the old
//     formats: the store is of format 3 at once and whole. A crash before
//     leaves the old format with every key where it was (step 1 of the
//     next Open clears what step 2 wrote); a crash after leaves format 3
//     with every key fingerprinted.
//  4. The cleanup: the old ranges are excised, so that no key stays on
//     disk in a table, and, for format 1, whose keys went through Pebble's
//     memtable into tables shared with other entries, everything is
//     compacted; Pebble's manifest is restarted (rewriteManifest); the
//     replay that follows removes the retired commit-log segments, which
//     hold keys in format 2, instead of keeping them for reuse, and then
//     deletes upgradingKey. Every Open that finds upgradingKey set (a crash
//     interrupted the cleanup) redoes the whole cleanup; every other Open
//     excises what is left of the old ranges (exciseLegacy).

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// legacyRanges are the key ranges of formats 1 and 2 that hold keys, or
// filters of keys.
var legacyRanges = []pebble.KeyRange{
	{Start: []byte{tagKey}, End: []byte{tagKey + 1}},
	{Start: []byte{tagFlushKey}, End: []byte{tagFilter + 1}},
}

// upgrade converts a store of format s.from (1 or 2) to format 3, and
// cleans up what the old format left on disk, or what a crash left of an
// earlier upgrade's cleanup.
func (s *Store) upgrade() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
	}()
	ctx := context.Background()
	if s.from == 0 && s.cleanupFrom == 0 {
		return s.exciseLegacy(ctx)
	}
	if s.from != 0 {
		if err := s.convert(ctx); err != nil {
			return err
		}
	}
	s.upgraded = true // the replay deletes upgradingKey after its part
	if err := s.exciseLegacy(ctx); err != nil {
		return err
	}
	if s.cleanupFrom == 1 {
		if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
			return fmt.Errorf("exact: upgrade %q: compact: %w", s.dir, err)
		}
	}
	return s.rewriteManifest()
}

// convert converts a store of format s.from to format 3, with upgradingKey
// set (steps 1 to 3 above).
func (s *Store) convert(ctx context.Context) (err error) {
	if err := s.db.Excise(ctx, pebble.KeyRange{Start: []byte{tagFP}, End: fpFiltersEnd}); err != nil {
		return fmt.Errorf("exact: upgrade %q: clear an interrupted upgrade: %w", s.dir, err)
	}
	if err := s.convertKeys(); err != nil {
		return fmt.Errorf("exact: upgrade %q from format %d: %w", s.dir, s.from, err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	err = errors.Join(b.Set(markerKey, []byte{formatVersion}, nil),
		b.Set(upgradingKey, []byte{byte(s.from)}, nil))
	for _, r := range legacyRanges {
		err = errors.Join(err, b.DeleteRange(r.Start, r.End, nil))
	}
	if err == nil {
		err = s.db.Apply(b, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("exact: upgrade %q from format %d: %w", s.dir, s.from, err)
	}
	s.cleanupFrom = s.from
	s.lg.Infof("exact: upgraded the state in %q from format %d to %d: binaries that read only format %d or older can no longer open it",
		s.dir, s.from, formatVersion, formatVersion-1)
	return nil
}

// rewriteManifest makes Pebble start a new MANIFEST holding the current
// version alone, and removes the older ones: their history names the
// bounds (a smallest and a largest key) of the tables of keys that the
// upgrade removed. Pebble starts one when the current one is past
// MaxManifestFileSize and its edits since the last start name more tables
// than the version holds: Pebble is reopened with that size at its least
// for ingestions of one-key tables (tagScratch), one at a time until it
// does, then excised, and reopened with the store's options again.
func (s *Store) rewriteManifest() error {
	fail := func(what string, err error) error {
		return fmt.Errorf("exact: upgrade %q: rewrite Pebble's manifest: %s: %w", s.dir, what, err)
	}
	if err := s.db.Close(); err != nil {
		return fail("close", err)
	}
	s.db = nil
	po := *s.popts
	po.MaxManifestFileSize = 1
	db, err := openPebble(s.dir, &po, s.lg)
	if err != nil {
		return fail("reopen", err)
	}
	s.db = db // for newTableWriter
	before, err := s.currentManifest()
	current := before
	// Each ingestion is an edit naming one table: Pebble starts a new
	// manifest once they outnumber the version's tables. Ingestions apply
	// their edit on this goroutine, and report their errors (a flush, on
	// Pebble's own goroutines, may retry for ever).
	for i := 0; err == nil && current == before && i < 256; i++ {
		path := s.fs.PathJoin(s.dir, fmt.Sprintf("%srotate-%d.sst", ingestPrefix, i))
		var w *sstable.Writer
		if w, err = s.newTableWriter(path); err == nil {
			err = finishTable(w, path, w.Set(binary.BigEndian.AppendUint64([]byte{tagScratch}, uint64(i)), nil))
		}
		if err == nil {
			err = db.Ingest(context.Background(), []string{path})
		}
		_ = s.fs.Remove(path) // linked into the store, or not
		if err == nil {
			current, err = s.currentManifest()
		}
	}
	if err == nil {
		err = db.Excise(context.Background(), pebble.KeyRange{Start: []byte{tagScratch}, End: []byte{tagScratch + 1}})
	}
	s.db = nil
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fail("rotate", err)
	}
	// The excision may have started yet another manifest: the marker,
	// read now that Pebble is closed, names the one to keep.
	if current, err = s.currentManifest(); err != nil {
		return fail("rotate", err)
	}
	ls, err := s.fs.List(s.dir)
	if err != nil {
		return fail("list", err)
	}
	for _, name := range ls {
		if strings.HasPrefix(name, "MANIFEST-") && name != current {
			if err := s.fs.Remove(s.fs.PathJoin(s.dir, name)); err != nil {
				return fail("remove "+name, err)
			}
		}
	}
	if err := syncDir(s.fs, s.dir); err != nil {
		return err
	}
	if s.db, err = openPebble(s.dir, s.popts, s.lg); err != nil {
		return fail("reopen", err)
	}
	return nil
}

// currentManifest returns the name of Pebble's current MANIFEST file.
func (s *Store) currentManifest() (string, error) {
	ls, err := s.fs.List(s.dir)
	if err != nil {
		return "", fmt.Errorf("list %q: %w", s.dir, err)
	}
	current, seq := "", -1
	for _, name := range ls {
		// marker.manifest.<seq>.<MANIFEST-nnnnnn>: the highest seq is current.
		rest, ok := strings.CutPrefix(name, "marker.manifest.")
		if !ok {
			continue
		}
		n, file, ok := strings.Cut(rest, ".")
		v, err := strconv.Atoi(n)
		if ok && err == nil && v > seq {
			current, seq = file, v
		}
	}
	if current == "" {
		return "", fmt.Errorf("%w: %q has no manifest marker", ErrCorrupt, s.dir)
	}
	return current, nil
}

// exciseLegacy excises the ranges of keys of the old formats, if a table
// still holds any.
func (s *Store) exciseLegacy(ctx context.Context) error {
	for _, r := range legacyRanges {
		n, err := s.db.EstimateDiskUsage(r.Start, r.End)
		if err != nil {
			return fmt.Errorf("exact: upgrade %q: %w", s.dir, err)
		}
		if n == 0 {
			continue
		}
		if err := s.db.Excise(ctx, r); err != nil {
			return fmt.Errorf("exact: upgrade %q: remove the keys of format %d: %w", s.dir, max(s.cleanupFrom, 1), err)
		}
	}
	return nil
}

// convertKeys writes the fingerprints of the keys of live generations, in
// the ranges of formats 1 and 2, as tables of format 3 with their filters,
// and ingests them in one step.
func (s *Store) convertKeys() (err error) {
	var paths []string
	defer func() {
		for _, p := range paths {
			_ = s.fs.Remove(p) // Ingest linked it into the store, or failed
		}
	}()
	type genFilter struct {
		gen, flush uint64
		f          keyFilter
	}
	var filters []genFilter
	var sc sortScratch
	var g *memGen
	var flush uint64
	write := func() error {
		if g == nil {
			return nil
		}
		defer g.free()
		path := s.fs.PathJoin(s.dir, fmt.Sprintf("%supgrade-%d-%d.sst", ingestPrefix, g.gen, flush))
		paths = append(paths, path)
		f, err := s.writeGenTable(path, g, flush, &sc)
		filters = append(filters, genFilter{g.gen, flush, f})
		g = nil
		return err
	}
	for _, src := range []struct {
		tag  byte
		skip int // bytes before the key: tag, gen[, flush]
	}{{tagKey, 9}, {tagFlushKey, 17}} {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: tagGen(src.tag, s.floor), UpperBound: []byte{src.tag + 1}})
		if err != nil {
			return err
		}
		for ok := it.First(); ok && err == nil; ok = it.Next() {
			k := it.Key()
			if len(k) <= src.skip {
				err = fmt.Errorf("%w: key entry of %d bytes", ErrCorrupt, len(k))
				break
			}
			gen, fl := beUint64(k[1:9]), uint64(0)
			if src.skip == 17 {
				fl = beUint64(k[9:17])
			}
			if g != nil && (g.gen != gen || flush != fl) {
				err = write()
			}
			if g == nil {
				g, flush = newMemGen(gen, s.memLimit), fl
			}
			fp := s.Fingerprint(k[src.skip:])
			g.add(&fp)
		}
		if err == nil {
			err = it.Error()
		}
		err = errors.Join(err, it.Close())
		if err == nil {
			err = write()
		}
		if err != nil {
			if g != nil {
				g.free()
			}
			return err
		}
	}
	if len(filters) == 0 {
		return nil
	}
	path := s.fs.PathJoin(s.dir, ingestPrefix+"upgrade-filters.sst")
	paths = append(paths, path)
	w, err := s.newTableWriter(path)
	if err != nil {
		return err
	}
	// A store upgraded from format 1 to 2 holds keys in both ranges.
	slices.SortFunc(filters, func(a, b genFilter) int {
		return cmp.Or(cmp.Compare(a.gen, b.gen), cmp.Compare(a.flush, b.flush))
	})
	for _, gf := range filters {
		if err = w.Set(filterKey(gf.gen, gf.flush), gf.f.marshal()); err != nil {
			break
		}
	}
	if err := finishTable(w, path, err); err != nil {
		return err
	}
	if err := s.db.Ingest(context.Background(), paths); err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	return nil
}
