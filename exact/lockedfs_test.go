package exact

import (
	"io"
	"os"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// crashableFS is a crashable MemFS whose crash clones never run alongside
// another of its operations: MemFS.CrashClone can deadlock against a
// concurrent Link (which takes MemFS's clone lock inside its tree lock,
// where other operations take them the other way round), and the store
// links ingested tables on its flush goroutine while commits run.
type crashableFS struct {
	mem *vfs.MemFS
	mu  sync.RWMutex
}

func newCrashableFS() *crashableFS { return &crashableFS{mem: vfs.NewCrashableMem()} }

// FS returns the file system to use: every operation holds a shared lock.
func (c *crashableFS) FS() vfs.FS { return lockedFS{FS: c.mem, mu: &c.mu} }

// CrashClone is MemFS.CrashClone, once every operation in progress ended.
func (c *crashableFS) CrashClone(cfg vfs.CrashCloneCfg) *vfs.MemFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mem.CrashClone(cfg)
}

type lockedFS struct {
	vfs.FS
	mu *sync.RWMutex
}

func (l lockedFS) file(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return lockedFile{File: f, mu: l.mu}, nil
}

func (l lockedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.file(l.FS.Create(name, c))
}

func (l lockedFS) Link(oldname, newname string) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.FS.Link(oldname, newname)
}

func (l lockedFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.file(l.FS.Open(name, opts...))
}

func (l lockedFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.file(l.FS.OpenReadWrite(name, c, opts...))
}

func (l lockedFS) OpenDir(name string) (vfs.File, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.file(l.FS.OpenDir(name))
}

func (l lockedFS) Remove(name string) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.FS.Remove(name)
}

func (l lockedFS) RemoveAll(name string) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.FS.RemoveAll(name)
}

func (l lockedFS) Rename(oldname, newname string) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.FS.Rename(oldname, newname)
}

func (l lockedFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.file(l.FS.ReuseForWrite(oldname, newname, c))
}

func (l lockedFS) MkdirAll(dir string, perm os.FileMode) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.FS.MkdirAll(dir, perm)
}

func (l lockedFS) Lock(name string) (io.Closer, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.FS.Lock(name)
}

func (l lockedFS) List(dir string) ([]string, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.FS.List(dir)
}

func (l lockedFS) Stat(name string) (vfs.FileInfo, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.FS.Stat(name)
}

type lockedFile struct {
	vfs.File
	mu *sync.RWMutex
}

func (f lockedFile) Close() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.Close()
}

func (f lockedFile) Read(p []byte) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.Read(p)
}

func (f lockedFile) ReadAt(p []byte, off int64) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.ReadAt(p, off)
}

func (f lockedFile) Write(p []byte) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.Write(p)
}

func (f lockedFile) WriteAt(p []byte, off int64) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.WriteAt(p, off)
}

func (f lockedFile) Preallocate(off, n int64) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.Preallocate(off, n)
}

func (f lockedFile) Stat() (vfs.FileInfo, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.Stat()
}

func (f lockedFile) Sync() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.Sync()
}

func (f lockedFile) SyncData() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.SyncData()
}

func (f lockedFile) SyncTo(n int64) (bool, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.File.SyncTo(n)
}
