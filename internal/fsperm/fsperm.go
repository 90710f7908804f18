// Package fsperm holds the modes of the engine's state directories and
// their files, and the file system wrapper that sets them.
//
// State directories are private: what they hold (the keys of format-1
// and format-2 stores, the fingerprint secret, result records) is for the
// user running the engine alone. On the operating system's file system
// (vfs.Default) directories are [DirMode] and files [FileMode] whatever
// the umask: [FS] sets the mode of every file and directory it creates,
// and exact.Open calls [MakePrivate] on everything already in a directory
// that holds a store (a state written before, or copied in by a restore).
// A directory exact.Open refuses is left as it was.
package fsperm

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Private modes of state directories and their files.
const (
	// DirMode is the mode of a state directory: 0700.
	DirMode os.FileMode = 0o700
	// FileMode is the mode of a file in a state directory: 0600.
	FileMode os.FileMode = 0o600
)

// FS returns fs, creating files with mode [FileMode] and
// directories with [DirMode] whatever the umask, if fs is
// vfs.Default; other file systems (in memory, wrapped for tests) are
// returned as they are.
func FS(fs vfs.FS) vfs.FS {
	if fs == vfs.Default {
		return privateFS{fs}
	}
	return fs
}

// privateFS is vfs.Default with private modes.
type privateFS struct{ vfs.FS }

// private sets the mode of a file just opened.
func private(f vfs.File, err error, name string) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	if err := os.Chmod(name, FileMode); err != nil {
		return nil, errors.Join(fmt.Errorf("fsperm: make %q private: %w", name, err), f.Close())
	}
	return f, nil
}

func (p privateFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := p.FS.Create(name, c)
	return private(f, err, name)
}

func (p privateFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := p.FS.OpenReadWrite(name, c, opts...)
	return private(f, err, name)
}

func (p privateFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := p.FS.ReuseForWrite(oldname, newname, c)
	return private(f, err, newname)
}

func (p privateFS) Lock(name string) (io.Closer, error) {
	c, err := p.FS.Lock(name)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(name, FileMode); err != nil {
		return nil, errors.Join(fmt.Errorf("fsperm: make %q private: %w", name, err), c.Close())
	}
	return c, nil
}

// MkdirAll creates dir and its missing parents with DirMode and
// sets the mode of each directory it creates to it, whatever the umask.
// A directory that exists keeps its mode: it may be the user's (a state
// directory's parent, or a directory that Open then refuses as not a
// state); Open makes a state directory private once it knows it is one.
func (p privateFS) MkdirAll(dir string, _ os.FileMode) error {
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, iofs.ErrNotExist) {
			break
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := p.FS.MkdirAll(dir, DirMode); err != nil {
		return err
	}
	for _, d := range created {
		if err := os.Chmod(d, DirMode); err != nil {
			return fmt.Errorf("fsperm: make %q private: %w", d, err)
		}
	}
	return nil
}

// MkdirAll creates dir and its missing parents on the operating
// system's file system with DirMode, whatever the umask; an
// existing directory keeps its mode.
func MkdirAll(dir string) error {
	return privateFS{vfs.Default}.MkdirAll(dir, DirMode)
}

// Unwrap returns the file system privateFS wraps.
func (p privateFS) Unwrap() vfs.FS { return p.FS }

// MakePrivate sets the modes of dir, a state directory on the operating
// system's file system, and of everything in it: DirMode for
// directories, FileMode for files. exact.Open calls it only once dir is
// known to hold a store (or nothing): a directory exact.Open refuses keeps every
// mode. Symbolic links are not followed.
func MakePrivate(dir string) error {
	// The store is open: Pebble may delete an obsolete file (a manifest,
	// an OPTIONS file) between the listing and its chmod.
	gone := func(err error) error {
		if errors.Is(err, iofs.ErrNotExist) {
			return nil
		}
		return err
	}
	err := filepath.WalkDir(dir, func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return gone(err)
		}
		switch {
		case d.IsDir():
			return gone(os.Chmod(path, DirMode))
		case d.Type().IsRegular():
			return gone(os.Chmod(path, FileMode))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("fsperm: make %q private: %w", dir, err)
	}
	return nil
}
