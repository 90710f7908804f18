package exact

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// batchOf returns a batch holding what the decoded record r holds.
func batchOf(r *logEntry) *Batch {
	b := &Batch{s: &Store{}}
	if r.hasCP {
		b.SetCheckpoint(r.cp)
	}
	b.drop = r.drop
	i := 0
	for _, rn := range r.runs {
		for range rn.n {
			switch {
			case r.fps != nil:
				b.AddFingerprint(rn.gen, r.fps[i], r.hashes[i])
			case r.keys != nil: // format 2: the batch fingerprints them
				b.Add(rn.gen, r.keys[i], r.hashes[i])
			default:
				b.logHash(rn.gen, r.hashes[i])
			}
			i++
		}
	}
	for _, op := range r.recs {
		if op.del {
			b.DeleteRecord(op.gen, op.fp)
		} else {
			b.PutRecord(op.gen, op.fp, op.val)
		}
	}
	return b
}

// fingerprints returns the fingerprints of r's keys: those it holds, or
// those of its keys of format 2 under the zero secret.
func fingerprints(r *logEntry) []Fingerprint {
	if r.keys == nil {
		return r.fps
	}
	s := &Store{}
	var out []Fingerprint
	for _, k := range r.keys {
		out = append(out, s.Fingerprint(k))
	}
	return out
}

// sameLogEntry reports how a and b differ, "" if they do not.
func sameLogEntry(a, b *logEntry) string {
	switch {
	case a.seq != b.seq || a.seg != b.seg:
		return "seq or segment"
	case a.hasCP != b.hasCP || !bytes.Equal(a.cp, b.cp):
		return "checkpoint"
	case a.drop != b.drop:
		return "drop"
	case fmt.Sprint(a.hashes) != fmt.Sprint(b.hashes):
		return "hashes"
	case b.keys != nil:
		return "keys (format 3 writes fingerprints)"
	case fmt.Sprintf("%x", fingerprints(a)) != fmt.Sprintf("%x", b.fps):
		return "fingerprints"
	case fmt.Sprintf("%+v", a.recs) != fmt.Sprintf("%+v", b.recs):
		return "result records"
	}
	// Runs compare by what they say: empty runs dropped, adjacent runs of
	// one generation merged (the encoder writes them as one).
	canon := func(runs []run) []run {
		var out []run
		for _, r := range runs {
			switch {
			case r.n == 0:
			case len(out) > 0 && out[len(out)-1].gen == r.gen:
				out[len(out)-1].n += r.n
			default:
				out = append(out, r)
			}
		}
		return out
	}
	if fmt.Sprint(canon(a.runs)) != fmt.Sprint(canon(b.runs)) {
		return "runs"
	}
	return ""
}

// format2Record returns the payload of a commit-log record of format 2:
// two keys in generation 3 (hash, uvarint length, key each), checkpoint
// "cp".
func format2Record() []byte {
	p := binary.LittleEndian.AppendUint64(nil, 9)    // seq
	p = binary.LittleEndian.AppendUint64(p, 1<<32|1) // segment
	p = append(p, recCheckpoint|recKeys, 2, 'c', 'p', 1, 3, 2)
	for i, k := range []string{"key-a", "key-b"} {
		p = binary.LittleEndian.AppendUint64(p, uint64(100+i))
		p = append(p, byte(len(k)))
		p = append(p, k...)
	}
	return p
}

// FuzzCommitRecord decodes arbitrary commit-log payloads: a bad one is
// refused with ErrCorrupt, never a panic, and a good one encodes back to a
// payload that decodes to the same record.
func FuzzCommitRecord(f *testing.F) {
	s := &Store{}
	fp := Fingerprint{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	for _, fill := range []func(b *Batch){
		func(b *Batch) {},
		func(b *Batch) { b.Add(3, []byte("key"), 7); b.Add(3, []byte("k2"), 8); b.Add(4, []byte("k3"), 9) },
		func(b *Batch) { // hashes derived from the fingerprints: fingerprints alone
			b.AddFingerprint(3, fp, FingerprintHash(&fp))
			fp2 := fp
			fp2[0] = 99
			b.AddFingerprint(4, fp2, FingerprintHash(&fp2))
			b.SetCheckpoint([]byte("cp"))
		},
		func(b *Batch) { b.SetCheckpoint([]byte("cp")); b.DropGenerationsBefore(2) },
		func(b *Batch) { b.PutRecord(5, fp, []byte("value")); b.DeleteRecord(6, fp) },
		func(b *Batch) {
			b.Add(1, bytes.Repeat([]byte{'x'}, 200), 1)
			b.PutRecord(1, fp, nil)
			b.SetCheckpoint(nil)
		},
	} {
		b := &Batch{s: s}
		fill(b)
		rec := encodeRecord(nil, b)
		stampRecord(rec, 9, 1<<32|1)
		f.Add(rec[recHeader:])
	}
	f.Add(endRecord(2)[recHeader:])
	f.Add(format2Record())
	f.Fuzz(func(t *testing.T, p []byte) {
		var r logEntry
		if err := decodeLogEntry(p, &r); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if r.end {
			return
		}
		checkReencodes(t, &r)
	})
}

// checkReencodes fails t unless the decoded record r makes a batch that
// encodes back to a record decoding the same.
func checkReencodes(t *testing.T, r *logEntry) {
	t.Helper()
	b := batchOf(r)
	if b.err != nil {
		t.Fatalf("a decoded record does not make a batch: %v", b.err)
	}
	rec := encodeRecord(nil, b)
	stampRecord(rec, r.seq, r.seg)
	var r2 logEntry
	if err := decodeLogEntry(rec[recHeader:], &r2); err != nil {
		t.Fatalf("re-encoded record does not decode: %v", err)
	}
	if d := sameLogEntry(r, &r2); d != "" {
		t.Fatalf("re-encoded record differs in its %s", d)
	}
}

// FuzzSegment reads arbitrary bytes as a commit-log segment file: the
// reader never panics nor allocates past the file, ends with nil (an end
// marker), errTorn (the end of the log) or an error wrapping ErrCorrupt,
// and every record it passes on encodes back to one that decodes the same.
func FuzzSegment(f *testing.F) {
	const seg = 1<<32 | 1
	fp := Fingerprint{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	s := &Store{}
	var file []byte
	for i, fill := range []func(b *Batch){
		func(b *Batch) { b.AddFingerprint(2, fp, FingerprintHash(&fp)); b.SetCheckpoint([]byte("cp")) },
		func(b *Batch) { b.AddFingerprint(2, fp, 7); b.DropGenerationsBefore(2) },
		func(b *Batch) { b.logHash(3, 9); b.PutRecord(3, fp, []byte("v")) },
	} {
		b := &Batch{s: s}
		fill(b)
		rec := encodeRecord(nil, b)
		stampRecord(rec, uint64(i+1), seg)
		file = append(file, rec...)
		f.Add(bytes.Clone(file))
	}
	f.Add(append(bytes.Clone(file), endRecord(seg)...))
	old := format2Record()
	framed := make([]byte, recHeader, recHeader+len(old))
	framed = append(framed, old...)
	binary.LittleEndian.PutUint32(framed, uint32(len(old)))
	binary.LittleEndian.PutUint64(framed[4:], xxhash.Sum64(old))
	f.Add(framed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, p []byte) {
		err := readLogEntries(bytes.NewReader(p), int64(len(p)), seg, func(r *logEntry) error {
			checkReencodes(t, r)
			return nil
		})
		if err != nil && !errors.Is(err, errTorn) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v is neither the end of the log nor ErrCorrupt", err)
		}
	})
}
