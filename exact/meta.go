package exact

// Metadata, backups and usage.

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// GetMeta returns the metadata value stored under name.
func (s *Store) GetMeta(name string) (value []byte, ok bool, err error) {
	if err := s.acquire(); err != nil {
		return nil, false, err
	}
	defer s.rw.RUnlock()
	defer s.recoverRead(&err)
	if m := s.mem; m != nil {
		m.mu.RLock()
		defer m.mu.RUnlock()
		v, ok := m.meta[name]
		return bytes.Clone(v), ok, nil
	}
	return s.get(metaKey(name))
}

// SetMeta stores value under name, durably (synced) when it returns nil.
func (s *Store) SetMeta(name string, value []byte) (err error) {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	if m := s.mem; m != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.meta[name] = bytes.Clone(value)
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
	}()
	if err := s.db.Set(metaKey(name), value, pebble.Sync); err != nil {
		return s.fail(fmt.Errorf("exact: set meta %q: %w", name, err))
	}
	return nil
}

// Backup writes a consistent copy of the store into destDir (on the same
// FS), which must not exist. It may run while commits run: the copy holds
// every batch whose Commit returned before Backup was called. Open the copy
// with Open.
func (s *Store) Backup(destDir string) (err error) {
	if err := s.acquire(); err != nil {
		return err
	}
	defer s.rw.RUnlock()
	if s.mem != nil {
		return fmt.Errorf("%w: Backup", ErrInMemory)
	}
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(r)
		}
	}()
	// No flush may run while Pebble copies its state: the copy could hold
	// the commit state a flush records after ingesting its tables, with a
	// version from before that ingestion.
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	if err := s.flushAllLocked(); err != nil {
		return err
	}
	if err := s.db.Checkpoint(destDir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("exact: backup to %q: %w", destDir, err)
	}
	return nil
}

// DiskUsage returns the bytes the store uses on its file system.
func (s *Store) DiskUsage() uint64 {
	if s.mem != nil || s.acquire() != nil {
		return 0
	}
	defer s.rw.RUnlock()
	return s.db.Metrics().DiskSpaceUsage() + uint64(max(0, s.logBytes.Load()))
}

// Metrics returns Pebble's metrics, for diagnostics; nil when closed.
func (s *Store) Metrics() *pebble.Metrics {
	if s.mem != nil || s.acquire() != nil {
		return nil
	}
	defer s.rw.RUnlock()
	return s.db.Metrics()
}
