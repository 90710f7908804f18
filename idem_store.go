package dedup

import (
	"errors"
	"fmt"
	"sync"

	"github.com/streamdedup/dedup/exact"
)

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

// PutRecord writes one record durably. Concurrent writes share one commit
// (see [recordCommitter]), which also drops the generations that left the
// window, as the engine's commits do: an engine that serves only
// idempotency keys still gives their space back.
func (r engineRecords) PutRecord(gen uint64, id recordID, val []byte) error {
	return r.e.idem.commits.write(r.e, &recordWrite{gen: gen, id: id, val: val})
}

// DeleteRecord deletes one record durably, in a commit shared like
// PutRecord's.
func (r engineRecords) DeleteRecord(gen uint64, id recordID) error {
	return r.e.idem.commits.write(r.e, &recordWrite{gen: gen, id: id, del: true})
}

func (r engineRecords) GetRecord(id recordID) (uint64, []byte, bool, error) {
	return r.e.store.GetRecord(id)
}

// recordWrite is one record put or deleted, waiting for its commit.
type recordWrite struct {
	gen  uint64
	id   recordID
	val  []byte
	del  bool
	done chan commitDone
}

// commitDone tells a waiting write its commit's outcome, or that it leads
// the next commit.
type commitDone struct {
	err  error
	lead bool
}

// maxCommitBytes bounds the record values of one shared commit, so that
// a few large results do not make one commit (and its waiters) slow.
const maxCommitBytes = 8 << 20

// recordCommitter turns the record writes of concurrent calls into shared
// commits: one commit-log record and one fsync for every write that
// arrived while the previous commit was on its way to the disk. A write
// that finds no commit under way leads one: it takes the waiting writes
// (its own among them), commits them together, hands the lead to the
// first write that arrived meanwhile, and wakes the others with the
// commit's outcome. Every write is durable (or failed) when write returns,
// as with a commit of its own; writes of one key never meet in a commit,
// since the calls on a key are serialised (idemTable.acquire).
//
// The store shares fsyncs between concurrent commits too, but each commit
// takes the log's locks and waits its turn for the sync in line; under
// many concurrent requests that queue, not the disk, set the latency.
type recordCommitter struct {
	mu      sync.Mutex
	leading bool
	queue   []*recordWrite
}

func (c *recordCommitter) write(e *Engine, w *recordWrite) error {
	if len(w.val) > exact.MaxRecordSize {
		return fmt.Errorf("%w: record of %d bytes, max %d", exact.ErrRecordTooLarge, len(w.val), exact.MaxRecordSize)
	}
	w.done = make(chan commitDone, 1)
	c.mu.Lock()
	c.queue = append(c.queue, w)
	if c.leading {
		c.mu.Unlock()
		if d := <-w.done; !d.lead {
			return d.err
		}
		c.mu.Lock()
	}
	// The leader's write is first in the queue: it arrived when no commit
	// was under way, or was handed the lead as the first one waiting.
	c.leading = true
	n, size := 0, 0
	for n < len(c.queue) && (n == 0 || size+len(c.queue[n].val) <= maxCommitBytes) {
		size += len(c.queue[n].val)
		n++
	}
	batch := c.queue[:n:n]
	c.queue = c.queue[n:]
	if len(c.queue) == 0 {
		c.queue = nil
	}
	c.mu.Unlock()

	panicked, err := commitRecovering(e, batch)

	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].done <- commitDone{lead: true}
	} else {
		c.leading = false
	}
	c.mu.Unlock()
	for _, x := range batch {
		if x != w {
			x.done <- commitDone{err: err}
		}
	}
	if panicked != nil {
		panic(panicked)
	}
	return err
}

// errCommitPanicked is what the writes sharing a commit get when the
// commit panicked in its leader's call (which panics on).
var errCommitPanicked = errors.New("dedup: the shared record commit panicked")

// commitRecovering runs commitRecords and returns a panic of it as a
// value, so that the committer hands the lead on and wakes the commit's
// other writes before the leader panics on: a panic must not leave every
// later write waiting for a commit that never ends.
func commitRecovering(e *Engine, batch []*recordWrite) (panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked, err = p, errCommitPanicked
		}
	}()
	return nil, e.commitRecords(batch)
}

// commitRecords writes batch in one durable commit, with the drop of the
// generations that left the window.
func (e *Engine) commitRecords(batch []*recordWrite) error {
	b := e.store.NewBatch()
	for _, w := range batch {
		if w.del {
			b.DeleteRecord(w.gen, w.id)
		} else {
			b.PutRecord(w.gen, w.id, w.val)
		}
	}
	if oldest := e.timing.OldestLive(e.opts.Now()); oldest > e.store.DroppedBefore() {
		b.DropGenerationsBefore(oldest)
	}
	_, err := b.Commit()
	return err
}
