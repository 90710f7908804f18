// Package snapshot is the on-disk format of dedup's filter snapshots: an
// atomic write of every generation's filter, and a verified read of the newest
// good snapshot after a restart or a crash.
//
// The package does not know what a filter is: the engine hands it opaque
// payloads (filter.MarshalBinary output, which has its own checksum) plus the
// metadata that places each payload in the rotating ring of generations, and
// gets the same bytes back. All I/O goes through a pebble vfs.FS, so tests run
// it on vfs.NewCrashableMem and vfs/errorfs.
//
// # Files
//
// A snapshot directory holds, for write sequence numbers S (one per Write,
// strictly increasing, never reused):
//
//	snapshot-<S>.manifest          the snapshot: header + references to segments
//	segment-<S>-<gen>-<shard>.seg  one filter payload, written by Write number S
//	*.tmp                          a file being written; swept by Write and Latest
//
// S is printed in decimal, zero-padded to six digits; gen and shard in decimal.
// A snapshot is one manifest plus every segment it references. Segments of
// final generations (ones that never change again) are shared: Write
// references a final segment of the previous snapshot instead of writing it
// again, so a snapshot of N final generations and one live generation costs
// one segment and one small manifest.
// A file name is never reused, so a Write never overwrites a file that an
// older manifest references.
//
// # Write protocol
//
// Every file is written to <name>.tmp, fsynced, closed and renamed to its name.
// After the segments the directory is fsynced; then the manifest is written the
// same way, renamed, and the directory fsynced again. The manifest is the
// commit point: a crash before its rename is durable leaves the previous
// manifest, and every segment it references, untouched, and the next Write or
// Latest sweeps the temporary files. Only once the new manifest is durable does
// Write delete old files: it keeps the new manifest and the previous good one
// (a fallback should the new one be damaged later) and every segment either
// references, and removes all other manifests and segments. Write takes the
// newest manifest that decodes for the previous one; WriteAfter takes the
// one its caller knows good (the engine: the one Latest verified, or its
// last Write), so that a damaged newer one is removed rather than kept.
//
// Write and Latest must not run concurrently on one directory (Latest sweeps
// temporary files that a concurrent Write may still be writing), and at most
// one Write runs at a time; the engine serialises its snapshots.
//
// # Wire format, version 1
//
// All integers are little-endian. CRC is CRC-32C (Castagnoli), used for the
// small sections; SUM is xxhash64 (seed 0), used for the bulk data, as it runs
// at ~8 GB/s where CRC-32C runs at ~1 GB/s on the build machine. Both file types
// start with the same 16-byte preamble, whose layout every future version
// keeps, so that a reader can tell a damaged file (ErrCorrupt) from one written
// by a newer format version (ErrVersion):
//
//	preamble:
//	  magic    [8]byte  "DDUPSNAP" (manifest) or "DDUPSEG\x00" (segment)
//	  version  uint32   format version, 1
//	  crc      uint32   CRC of magic and version
//
// A manifest is the preamble, two sections, and a trailer:
//
//	header section:
//	  length   uint32   length of the header body (28 + options length)
//	  body:
//	    seed       uint64   hash seed of the state directory
//	    commitSeq  uint64   every commit with seq <= commitSeq is in the filters
//	    created    int64    unix nanoseconds
//	    optLen     uint32   length of options (at most 1 MiB)
//	    options    [optLen]byte, opaque to this package
//	  crc      uint32   CRC of the body
//	segment references section:
//	  count    uint32   number of references (at most 1<<20)
//	  length   uint32   length of the references body
//	  body, count times:
//	    id       uint64   generation number
//	    shard    uint32
//	    start    int64    unix nanoseconds
//	    end      int64    unix nanoseconds
//	    keys     uint64   keys held
//	    kind     uint8    filter.Kind
//	    flags    uint8    bit 0: final; other bits zero
//	    nameLen  uint16   length of name (at most 255)
//	    name     [nameLen]byte, segment file name in the manifest's directory
//	    size     uint64   size of the segment file in bytes
//	    fileSum  uint64   the segment's trailer SUM
//	  crc      uint32   CRC of the references body
//	trailer:
//	  sum      uint64   SUM of every preceding byte of the file
//
// A segment is the preamble, a metadata section, the payload, and a trailer:
//
//	metadata section:
//	  length   uint32   46 in version 1
//	  body:
//	    id, shard, start, end, keys, kind, flags as in a reference
//	    payloadLen  uint64
//	  crc      uint32   CRC of the body
//	payload:
//	  bytes    [payloadLen]byte
//	  sum      uint64   SUM of the payload bytes
//	trailer:
//	  sum      uint64   SUM of every preceding byte of the file
//
// A manifest is at most 64 MiB. A segment's payloadLen must equal its file size
// minus 86 bytes of framing, and the size and trailer SUM must equal those the
// manifest records for it, as must the metadata. Readers check every length
// against the bytes actually present before allocating, verify every checksum, and
// reject trailing bytes; any failure is an error wrapping ErrCorrupt, never a
// panic.
package snapshot
