package dedup

import "github.com/streamdedup/dedup/exact"

// recordID is a key's record identifier in the exact store: its keyed
// 128-bit fingerprint ([exact.Store.Fingerprint]).
type recordID = exact.Fingerprint

// MaxResultSize is the largest result [Engine.Complete] stores, in bytes:
// what a store record holds ([exact.MaxRecordSize]) less the record's
// header.
const MaxResultSize = exact.MaxRecordSize - recordHeaderSize

func (e *Engine) recordID(key []byte) recordID { return e.store.Fingerprint(key) }

// records is the engine's exact store as the idempotency calls use it.
func (e *Engine) records() engineRecords { return engineRecords{e} }

type engineRecords struct{ e *Engine }

// PutRecord writes one record in one durable commit, which also drops the
// generations that left the window, as the engine's commits do: an engine
// that serves only idempotency keys still gives their space back.
func (r engineRecords) PutRecord(gen uint64, id recordID, val []byte) error {
	b := r.e.store.NewBatch()
	b.PutRecord(gen, id, val)
	r.dropExpired(b)
	_, err := b.Commit()
	return err
}

func (r engineRecords) DeleteRecord(gen uint64, id recordID) error {
	b := r.e.store.NewBatch()
	b.DeleteRecord(gen, id)
	r.dropExpired(b)
	_, err := b.Commit()
	return err
}

func (r engineRecords) GetRecord(id recordID) (uint64, []byte, bool, error) {
	return r.e.store.GetRecord(id)
}

func (r engineRecords) dropExpired(b *exact.Batch) {
	if oldest := r.e.timing.OldestLive(r.e.opts.Now()); oldest > r.e.store.DroppedBefore() {
		b.DropGenerationsBefore(oldest)
	}
}
