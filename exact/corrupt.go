package exact

// Damage at rest: Pebble's corruption reports turned into errors of the
// corruption class that name the damaged file.

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// corruptionListener is Pebble's DataCorruption event: it is raised on the
// goroutine whose read met a damaged block (a checksum mismatch), before
// Pebble returns the error to that read. Pebble's default handler calls
// Logger.Fatalf; this one only logs, so that the read returns the error
// (see corruption) and the Store stays usable for what is not damaged.
func corruptionListener(lg *fatalLogger) func(pebble.DataCorruptionInfo) {
	return func(info pebble.DataCorruptionInfo) {
		lg.Errorf("exact: corrupt table %s: %v", info.Path, info.Details)
	}
}

// corruption returns err marked with ErrCorrupt, naming the damaged file,
// when Pebble reports it as corruption (pebble.IsCorruptionError); any
// other err unchanged.
func corruption(err error) error {
	if err == nil || !pebble.IsCorruptionError(err) || errors.Is(err, ErrCorrupt) {
		return err
	}
	ce := &corruptError{err: err}
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil {
		ce.path, ce.detail = info.Path, info.Details
	}
	return ce
}

// corruptError is a damaged file Pebble met while reading.
type corruptError struct {
	path   string // "" when Pebble did not say
	detail error  // Pebble's description of the damage, nil if none
	err    error
}

func (e *corruptError) Error() string {
	detail := e.err
	if e.detail != nil {
		detail = e.detail
	}
	if e.path == "" {
		return fmt.Sprintf("%v: %v", ErrCorrupt, detail)
	}
	return fmt.Sprintf("%v: file %s: %v", ErrCorrupt, e.path, detail)
}

func (e *corruptError) Unwrap() []error { return []error{ErrCorrupt, e.err} }

// CheckResult is what Check read.
type CheckResult struct {
	Tables     int   // tables whose every block checksum was verified
	TableBytes int64 // their size
	Segments   int   // commit-log segments read
	Commits    int   // intact commit records in them
}

// Check verifies every block checksum of every table of the store in dir
// (sstable.Reader.ValidateBlockChecksums) and reads every record of its
// commit log, without replaying or changing anything (Pebble is opened
// read-only, which takes the directory's lock: a store in use is
// refused). A damaged table is an error matching ErrCorrupt that names the
// file; a commit log that ends torn is what a crash leaves and is not one.
// opts.FS is used (default vfs.Default).
func Check(dir string, opts Options) (CheckResult, error) {
	var res CheckResult
	opts.withDefaults()
	fs := opts.FS
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return res, fmt.Errorf("exact: inspect %q: %w", dir, err)
	}
	if !desc.Exists {
		return res, fmt.Errorf("%w: %q", ErrNotOurs, dir)
	}
	lg := newFatalLogger(opts.Logger)
	po := opts.pebbleOptions(lg)
	po.FormatMajorVersion = desc.FormatMajorVersion
	po.ReadOnly = true
	po.Cache = pebble.NewCache(8 << 20)
	defer po.Cache.Unref()
	db, err := openPebble(dir, po, lg)
	if err != nil {
		return res, fmt.Errorf("exact: check %q: %w", dir, corruption(err))
	}
	defer db.Close()
	levels, err := db.SSTables()
	if err != nil {
		return res, fmt.Errorf("exact: check %q: %w", dir, err)
	}
	seen := map[uint64]bool{}
	for _, level := range levels {
		for _, t := range level {
			num := uint64(t.BackingSSTNum)
			if seen[num] {
				continue
			}
			seen[num] = true
			path := fs.PathJoin(dir, fmt.Sprintf("%s.sst", t.BackingSSTNum))
			n, err := checkTable(fs, path, po)
			if err != nil {
				return res, err
			}
			res.Tables++
			res.TableBytes += n
		}
	}
	ls, err := fs.List(dir)
	if err != nil {
		return res, fmt.Errorf("exact: list %q: %w", dir, err)
	}
	for _, name := range ls {
		num, ok := parseSegName(name)
		if !ok {
			continue
		}
		path := fs.PathJoin(dir, name)
		f, err := fs.Open(path)
		if err != nil {
			return res, fmt.Errorf("exact: open commit log %q: %w", path, err)
		}
		fi, err := f.Stat()
		if err == nil {
			err = readLogEntries(f, fi.Size(), num, func(*logEntry) error { res.Commits++; return nil })
		}
		err = errors.Join(err, f.Close())
		if err != nil && !errors.Is(err, errTorn) {
			return res, fmt.Errorf("exact: check commit log %q: %w", path, err)
		}
		res.Segments++
	}
	return res, nil
}

// checkTable verifies every block checksum of the table at path and
// returns its size.
func checkTable(fs vfs.FS, path string, po *pebble.Options) (int64, error) {
	f, err := fs.Open(path)
	if err != nil {
		return 0, fmt.Errorf("exact: check table %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, errors.Join(fmt.Errorf("exact: check table %s: %w", path, err), f.Close())
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		return 0, errors.Join(fmt.Errorf("exact: check table %s: %w", path, err), f.Close())
	}
	r, err := sstable.NewReader(context.Background(), readable, po.MakeReaderOptions())
	if err != nil {
		return 0, errors.Join(tableDamage(path, err), readable.Close())
	}
	err = r.ValidateBlockChecksums()
	if cerr := r.Close(); err == nil && cerr != nil {
		return 0, fmt.Errorf("exact: check table %s: %w", path, cerr)
	}
	if err != nil {
		return 0, tableDamage(path, err)
	}
	return fi.Size(), nil
}

// tableDamage is the error of a table at path that does not read.
func tableDamage(path string, err error) error {
	if !pebble.IsCorruptionError(err) {
		return fmt.Errorf("exact: check table %s: %w", path, err)
	}
	return &corruptError{path: path, err: err}
}
