package exact

import "github.com/cockroachdb/pebble/v2/vfs"

// noPreallocFS is the file system Pebble writes through: fs, except that
// files ignore Preallocate. Pebble preallocates each write-ahead log to
// 110% of the memtable (70 MiB at 64 MiB memtables) and keeps up to five
// old logs for reuse, blocks and all: a state holding 12 MB of keys took
// 423 MB of disk. Without preallocation a log takes the space of what was
// written to it; appending then allocates as it goes, which costs a
// commit's fsync an update of the file's block map, small next to the
// fsync itself.
type noPreallocFS struct{ vfs.FS }

func (fs noPreallocFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return wrapNoPrealloc(fs.FS.Create(name, category))
}

func (fs noPreallocFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return wrapNoPrealloc(fs.FS.OpenReadWrite(name, category, opts...))
}

func (fs noPreallocFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	return wrapNoPrealloc(fs.FS.ReuseForWrite(oldname, newname, category))
}

// Unwrap returns the file system underneath.
func (fs noPreallocFS) Unwrap() vfs.FS { return fs.FS }

func wrapNoPrealloc(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noPreallocFile{f}, nil
}

// noPreallocFile is a file whose Preallocate does nothing.
type noPreallocFile struct{ vfs.File }

func (noPreallocFile) Preallocate(offset, length int64) error { return nil }
