package exact

import (
	"encoding/binary"
	"fmt"
)

// logEntry is a decoded record of the commit log (a log entry; a result
// record is another thing, see records.go). Its slices point into the
// payload it was decoded from.
type logEntry struct {
	seq    uint64
	seg    uint64
	end    bool
	cp     []byte
	hasCP  bool
	drop   uint64
	runs   []run
	hashes []uint64
	fps    []Fingerprint // nil if the record holds none
	keys   [][]byte      // a record of format 2: its keys, nil if none
	recs   []logRecOp
}

// entryDecoder reads a log entry's payload: d.p is what is left of it.
type entryDecoder struct{ p []byte }

// uv reads a uvarint.
func (d *entryDecoder) uv() (uint64, bool) {
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		return 0, false
	}
	d.p = d.p[n:]
	return v, true
}

// badEntry reports a log entry that does not decode, naming its bad part.
func badEntry(what string) error {
	return fmt.Errorf("%w: commit log record: bad %s", ErrCorrupt, what)
}

// decodeLogEntry decodes a payload whose checksum matched.
func decodeLogEntry(p []byte, r *logEntry) error {
	d := &entryDecoder{p}
	if len(d.p) < recFixed {
		return badEntry("length")
	}
	r.seq = binary.LittleEndian.Uint64(d.p)
	r.seg = binary.LittleEndian.Uint64(d.p[8:])
	flags := d.p[16]
	d.p = d.p[recFixed:]
	if r.end = flags&recEnd != 0; r.end {
		if flags != recEnd || len(d.p) != 0 {
			return badEntry("end marker")
		}
		return nil
	}
	r.cp, r.hasCP, r.drop = nil, false, 0
	r.runs, r.hashes, r.keys, r.recs = r.runs[:0], r.hashes[:0], r.keys[:0], r.recs[:0]
	if flags&recCheckpoint != 0 {
		n, ok := d.uv()
		if !ok || n > uint64(len(d.p)) {
			return badEntry("checkpoint")
		}
		r.cp, r.hasCP, d.p = d.p[:n], true, d.p[n:]
	}
	if flags&recDrop != 0 {
		var ok bool
		if r.drop, ok = d.uv(); !ok {
			return badEntry("drop")
		}
	}
	keys := flags&recKeys != 0
	withFPs := flags&recFPs != 0
	hashed := flags&recHashes != 0
	if (keys && (withFPs || hashed)) || (hashed && !withFPs) {
		return badEntry("flags")
	}
	// entry is the size of an entry, the smallest for recKeys.
	entry := uint64(8)
	switch {
	case hashed:
		entry = 8 + fpSize
	case withFPs:
		entry = fpSize
	case keys:
		entry = 10
	}
	r.fps = r.fps[:0]
	nruns, ok := d.uv()
	if !ok || nruns > uint64(len(d.p)) {
		return badEntry("run count")
	}
	for range nruns {
		if err := d.run(r, entry, keys, withFPs, hashed); err != nil {
			return err
		}
	}
	if !keys {
		r.keys = nil
	}
	if !withFPs {
		r.fps = nil
	}
	if flags&recRecords != 0 {
		if err := d.records(r); err != nil {
			return err
		}
	}
	if flags&^(recCheckpoint|recDrop|recKeys|recRecords|recFPs|recHashes) != 0 {
		return badEntry("flags")
	}
	if len(d.p) != 0 {
		return badEntry("trailing bytes")
	}
	return nil
}

// run decodes one run of r: a generation and its hashes, with their
// fingerprints (withFPs) or keys; entry is the smallest size of one.
func (d *entryDecoder) run(r *logEntry, entry uint64, keys, withFPs, hashed bool) error {
	gen, ok1 := d.uv()
	n, ok2 := d.uv()
	if !ok1 || !ok2 || n > uint64(len(d.p))/entry {
		return badEntry("run")
	}
	r.runs = append(r.runs, run{gen: gen, n: int(n)})
	if withFPs {
		for range n {
			var h uint64
			if hashed {
				h = binary.LittleEndian.Uint64(d.p)
				d.p = d.p[8:]
			}
			var fp Fingerprint
			copy(fp[:], d.p)
			d.p = d.p[fpSize:]
			if !hashed {
				h = FingerprintHash(&fp)
			}
			r.hashes = append(r.hashes, h)
			r.fps = append(r.fps, fp)
		}
		return nil
	}
	for range n {
		if len(d.p) < 8 {
			return badEntry("hash")
		}
		r.hashes = append(r.hashes, binary.LittleEndian.Uint64(d.p))
		d.p = d.p[8:]
		if keys {
			kl, ok := d.uv()
			if !ok || kl == 0 || kl > MaxKeySize || kl > uint64(len(d.p)) {
				return badEntry("key")
			}
			r.keys = append(r.keys, d.p[:kl])
			d.p = d.p[kl:]
		}
	}
	return nil
}

// records decodes the result records of r.
func (d *entryDecoder) records(r *logEntry) error {
	n, ok := d.uv()
	if !ok || n == 0 || n > uint64(len(d.p)) {
		return badEntry("record count")
	}
	for range n {
		var op logRecOp
		var ok bool
		if op.gen, ok = d.uv(); !ok || len(d.p) < len(op.fp)+1 {
			return badEntry("record")
		}
		copy(op.fp[:], d.p)
		kind := d.p[len(op.fp)]
		d.p = d.p[len(op.fp)+1:]
		switch kind {
		case recordDelete:
			op.del = true
		case recordPut:
			vl, ok := d.uv()
			if !ok || vl > MaxRecordSize || vl > uint64(len(d.p)) {
				return badEntry("record value")
			}
			op.val, d.p = d.p[:vl], d.p[vl:]
		default:
			return badEntry("record kind")
		}
		r.recs = append(r.recs, op)
	}
	return nil
}
