package exact

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dchest/siphash"
)

// Fingerprints: a store names a key by its keyed 128-bit fingerprint, in
// its format-2 keys, its commit log and its result records. The key of
// the hash (the secret) is drawn when the store is created and kept in it.

// Fingerprint is a key's keyed 128-bit fingerprint (see [Store.Fingerprint]).
type Fingerprint [16]byte

// secretSize is the size of a state's fingerprint secret: SipHash's key.
const secretSize = 16

// Fingerprint returns the fingerprint of key: SipHash-2-4-128 keyed with
// the store's secret, drawn at random when the store was created and kept
// in it. Without the secret, no one can choose keys whose fingerprints
// collide; with it, fingerprints are the same across Opens and in a
// backup.
func (s *Store) Fingerprint(key []byte) Fingerprint {
	h0, h1 := siphash.Hash128(s.k0, s.k1, key)
	var fp Fingerprint
	binary.LittleEndian.PutUint64(fp[:8], h0)
	binary.LittleEndian.PutUint64(fp[8:], h1)
	return fp
}

// FingerprintHash returns the 64-bit hash of a key that a fingerprint
// gives: its first 8 bytes, little-endian. A caller that hashes its keys
// this way (the engine's filters in exact mode, over a directory) can
// rebuild its hashes from the fingerprints a store keeps
// ([Store.ScanFingerprints]), and a commit log entry of such a key holds
// the fingerprint alone.
func FingerprintHash(fp *Fingerprint) uint64 { return binary.LittleEndian.Uint64(fp[:8]) }

// loadSecret reads the store's fingerprint secret, creating it durably if
// the store has none (a new store, or one written before it existed).
func (s *Store) loadSecret() error {
	v, ok, err := s.get(secretKey)
	if err != nil {
		return err
	}
	if !ok {
		v = make([]byte, secretSize)
		if _, err := rand.Read(v); err != nil {
			return fmt.Errorf("exact: draw the fingerprint secret: %w", err)
		}
		if err := s.db.Set(secretKey, v, pebble.Sync); err != nil {
			return fmt.Errorf("exact: write the fingerprint secret: %w", err)
		}
	} else if len(v) != secretSize {
		return fmt.Errorf("%w: fingerprint secret of %d bytes, want %d", ErrCorrupt, len(v), secretSize)
	}
	s.k0 = binary.LittleEndian.Uint64(v)
	s.k1 = binary.LittleEndian.Uint64(v[8:])
	return nil
}
