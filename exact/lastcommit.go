package exact

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// LastCommit returns the sequence number of the last commit the store in
// dir holds: the last one its tables hold, followed by the run of intact
// commit-log records after it, as [Open] would replay them. It changes
// nothing (Pebble is opened read-only, which takes the directory's lock: a
// store in use is refused). A snapshot of the filters that covers a later
// commit is proof of lost commits ([ErrLostCommits]). opts.FS is used
// (default vfs.Default); 0 is a store that holds no commit.
func LastCommit(dir string, opts Options) (uint64, error) {
	opts.withDefaults()
	fs := opts.FS
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return 0, fmt.Errorf("exact: inspect %q: %w", dir, err)
	}
	if !desc.Exists {
		return 0, fmt.Errorf("%w: %q", ErrNotOurs, dir)
	}
	lg := newFatalLogger(opts.Logger)
	po := opts.pebbleOptions(lg)
	po.FormatMajorVersion = desc.FormatMajorVersion
	po.ReadOnly = true
	po.Cache = pebble.NewCache(1 << 20)
	defer po.Cache.Unref()
	db, err := openPebble(dir, po, lg)
	if err != nil {
		return 0, fmt.Errorf("exact: open %q: %w", dir, corruption(err))
	}
	var last uint64
	v, closer, err := db.Get(seqKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		err = nil // no commit flushed yet
	case err != nil:
		return 0, errors.Join(fmt.Errorf("exact: read %q: %w", dir, corruption(err)), db.Close())
	default:
		last, err = decodeBE64("seq", v)
		err = errors.Join(err, closer.Close())
	}
	if err = errors.Join(err, db.Close()); err != nil {
		return 0, err
	}
	ls, err := fs.List(dir)
	if err != nil {
		return 0, fmt.Errorf("exact: list %q: %w", dir, err)
	}
	var nums []uint64
	for _, name := range ls {
		if n, ok := parseSegName(name); ok {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	for _, num := range nums {
		path := fs.PathJoin(dir, segName(num))
		f, err := fs.Open(path)
		if err != nil {
			return 0, fmt.Errorf("exact: open commit log %q: %w", path, err)
		}
		fi, err := f.Stat()
		if err == nil {
			err = readLogEntries(f, fi.Size(), num, func(r *logEntry) error {
				switch {
				case r.seq <= last:
				case r.seq == last+1:
					last++
				default:
					return fmt.Errorf("%w: commit log %q skips from seq %d to %d", ErrCorrupt, path, last, r.seq)
				}
				return nil
			})
		}
		err = errors.Join(err, f.Close())
		if errors.Is(err, errTorn) {
			break // nothing after a torn record was acknowledged
		}
		if err != nil {
			return 0, fmt.Errorf("exact: read commit log %q: %w", path, err)
		}
	}
	return last, nil
}

// CommitSpan names the commits from through to, for messages: "commit 7",
// or "commits 3 to 10".
func CommitSpan(from, to uint64) string {
	if from == to {
		return fmt.Sprintf("commit %d", from)
	}
	return fmt.Sprintf("commits %d to %d", from, to)
}
