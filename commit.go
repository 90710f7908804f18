package dedup

import (
	"math"
	"time"
)

type commitReq struct {
	limit uint64 // commit the keys of epochs <= limit
	cp    []byte
	err   error
	done  chan struct{}
}

// Commit makes every key observed New since the last commit durable,
// together with checkpoint, in one atomic, fsynced step, and returns once
// it is. After a crash, committed keys are remembered, keys in flight are
// not, and Checkpoint returns the last committed checkpoint. A nil
// checkpoint keeps the previous one. Concurrent Commits share one write.
func (e *Engine) Commit(checkpoint []byte) error {
	e.lifecycle.RLock()
	defer e.lifecycle.RUnlock()
	if e.closed.Load() {
		return ErrClosed
	}
	return e.commit(math.MaxUint64, checkpoint)
}

// Barrier is a point in an engine's stream of New verdicts; see
// [Engine.Barrier].
type Barrier uint64

// Barrier marks the keys observed New so far: [Engine.CommitThrough](b, cp) makes
// exactly those durable (with cp), while keys observed after Barrier
// returned stay in flight. A consumer can so keep observing the next
// events while the previous ones commit:
//
//	b := e.Barrier()           // everything up to offset X is observed
//	go e.CommitThrough(b, X)   // commits those keys, with X
//	... observe the events after X meanwhile ...
//
// Keys whose Observe runs concurrently with Barrier fall on either side.
func (e *Engine) Barrier() Barrier { return Barrier(e.epoch.Add(1) - 1) }

// CommitThrough is [Engine.Commit] restricted to the keys observed New
// before barrier b (see [Engine.Barrier]): they become durable together with checkpoint;
// keys observed after b stay in flight. Concurrent commits share one write.
func (e *Engine) CommitThrough(b Barrier, checkpoint []byte) error {
	e.lifecycle.RLock()
	defer e.lifecycle.RUnlock()
	if e.closed.Load() {
		return ErrClosed
	}
	return e.commit(uint64(b), checkpoint)
}

// commit queues a commit request; the first caller to find no leader
// becomes it and commits for every request queued meanwhile.
func (e *Engine) commit(limit uint64, checkpoint []byte) error {
	req := &commitReq{limit: limit, done: make(chan struct{})}
	if checkpoint != nil {
		req.cp = append([]byte{}, checkpoint...)
	}
	e.cmu.Lock()
	e.cqueue = append(e.cqueue, req)
	if e.cleader {
		e.cmu.Unlock()
		<-req.done
		return req.err
	}
	e.cleader = true
	for len(e.cqueue) > 0 {
		group := e.cqueue
		e.cqueue = nil
		e.cmu.Unlock()
		// One write for the group, through its furthest barrier, with the
		// checkpoint that goes with that barrier (the last one given).
		var limit uint64
		var cp []byte
		for _, r := range group {
			limit = max(limit, r.limit)
		}
		for _, r := range group {
			if r.cp != nil && r.limit == limit {
				cp = r.cp
			}
		}
		if cp == nil {
			for _, r := range group {
				if r.cp != nil {
					cp = r.cp
				}
			}
		}
		err := e.commitOnce(limit, cp)
		for _, r := range group {
			r.err = err
			close(r.done)
		}
		e.cmu.Lock()
	}
	e.cleader = false
	e.cmu.Unlock()
	return req.err
}

// commitOnce writes the keys in flight and cp in one batch. Keys stay
// visible as InFlight (in the shards' committing sets) until the batch is
// durable and they are in their filters, so no Observe sees a gap.
func (e *Engine) commitOnce(limit uint64, cp []byte) error {
	e.commitGate.Lock()
	defer e.commitGate.Unlock()
	start := time.Now()
	now := e.opts.Now()
	oldest := e.timing.OldestLive(now)
	batch := e.store.NewBatch()
	n := 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		s.rollEpoch(e.epoch.Load())
		s.committing = s.takeThrough(limit)
		s.mu.Unlock()
		// committing is only written by the commit leader: reading it
		// without the lock is safe.
		for _, es := range s.committing {
			c := es.set
			n += c.n
			if !e.logCommits {
				continue
			}
			c.each(func(h uint64, en inflightEntry) {
				if en.gen >= oldest {
					batch.Add(en.gen, c.key(en), h)
				}
			})
		}
	}
	// A range delete only when a generation has expired since the last
	// one: each tombstone costs every later lookup until compacted away.
	if oldest > e.store.DroppedBefore() {
		batch.DropGenerationsBefore(oldest)
	}
	if cp != nil {
		batch.SetCheckpoint(cp)
	}
	seq, err := batch.Commit()
	var addErr error
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		if err != nil {
			// Not durable: back in flight, for a later Commit.
			s.older = append(s.committing, s.older...)
		} else {
			if aerr := s.addCommitted(now, e.exactMode, len(e.shards)); aerr != nil && addErr == nil {
				addErr = aerr
			}
		}
		s.committing = nil
		s.mu.Unlock()
	}
	d := time.Since(start)
	if err != nil {
		e.stats.commitErrors.Add(1)
		msg := err.Error()
		e.stats.lastCommitErr.Store(&msg)
		return wrap(err, "commit")
	}
	e.inflightCount.Add(-int64(n))
	e.cpMu.Lock()
	if cp != nil {
		e.checkpoint = cp
	}
	e.commitSeq = seq
	e.cpMu.Unlock()
	e.stats.commits.Add(1)
	e.stats.committedKeys.Add(uint64(n))
	e.stats.commitNanos.Add(uint64(d))
	e.stats.lastCommitNs.Store(int64(d))
	if int64(d) > e.stats.maxCommitNs.Load() {
		e.stats.maxCommitNs.Store(int64(d))
	}
	if addErr != nil {
		return wrap(addErr, "commit: filters")
	}
	return nil
}

// Checkpoint returns a copy of the last committed checkpoint, nil if none.
func (e *Engine) Checkpoint() []byte {
	e.cpMu.Lock()
	defer e.cpMu.Unlock()
	if e.checkpoint == nil {
		return nil
	}
	return append([]byte{}, e.checkpoint...)
}
