package exact

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// batchOf returns a batch holding what the decoded record r holds.
func batchOf(r *record) *Batch {
	b := &Batch{s: &Store{}}
	if r.hasCP {
		b.SetCheckpoint(r.cp)
	}
	b.drop = r.drop
	i := 0
	for _, rn := range r.runs {
		for range rn.n {
			if r.keys != nil {
				b.Add(rn.gen, r.keys[i], r.hashes[i])
			} else {
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

// sameRecord reports how a and b differ, "" if they do not.
func sameRecord(a, b *record) string {
	switch {
	case a.seq != b.seq || a.seg != b.seg:
		return "seq or segment"
	case a.hasCP != b.hasCP || !bytes.Equal(a.cp, b.cp):
		return "checkpoint"
	case a.drop != b.drop:
		return "drop"
	case fmt.Sprint(a.hashes) != fmt.Sprint(b.hashes):
		return "hashes"
	case len(a.keys) != len(b.keys) || fmt.Sprintf("%q", a.keys) != fmt.Sprintf("%q", b.keys):
		return "keys"
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

// FuzzCommitRecord decodes arbitrary commit-log payloads: a bad one is
// refused with ErrCorrupt, never a panic, and a good one encodes back to a
// payload that decodes to the same record.
func FuzzCommitRecord(f *testing.F) {
	s := &Store{}
	fp := Fingerprint{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	for _, fill := range []func(b *Batch){
		func(b *Batch) {},
		func(b *Batch) { b.Add(3, []byte("key"), 7); b.Add(3, []byte("k2"), 8); b.Add(4, []byte("k3"), 9) },
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
		sealRecord(rec, 9, 1<<32|1)
		f.Add(rec[recHeader:])
	}
	f.Add(endRecord(2)[recHeader:])
	f.Fuzz(func(t *testing.T, p []byte) {
		var r record
		if err := decodeRecord(p, &r); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if r.end {
			return
		}
		b := batchOf(&r)
		if b.err != nil {
			t.Fatalf("a decoded record does not make a batch: %v", b.err)
		}
		rec := encodeRecord(nil, b)
		sealRecord(rec, r.seq, r.seg)
		var r2 record
		if err := decodeRecord(rec[recHeader:], &r2); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if d := sameRecord(&r, &r2); d != "" {
			t.Fatalf("re-encoded record differs in its %s", d)
		}
	})
}
