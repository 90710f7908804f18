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
// checkpoint keeps the previous one. Under [Options.ExplicitDone] Commit
// makes durable only the keys Done; the others stay in flight.
//
// Concurrent commits (Commit and CommitThrough) share one write: the
// commits that arrive while one is writing queue, and the next write
// takes them all, through the furthest barrier among them, with the
// checkpoint of the one that queued last (a nil checkpoint does not
// count). That is the outcome of running them one after the other in the
// order they queued: the latest call's checkpoint wins.
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

// Barrier marks the keys observed New so far (under [Options.ExplicitDone]:
// the keys Done so far): [Engine.CommitThrough](b, cp) makes exactly those
// durable (with cp), while keys observed (Done) after Barrier returned stay
// in flight. A consumer can so keep observing the next events while the
// previous ones commit:
//
//	b := e.Barrier()           // everything up to offset X is observed
//	go e.CommitThrough(b, X)   // commits those keys, with X
//	... observe the events after X meanwhile ...
//
// Keys whose Observe (Done) runs concurrently with Barrier fall on either
// side. A worker pool takes the Barrier under the lock that orders its
// output and Done calls (see the package doc, "Worker pools").
func (e *Engine) Barrier() Barrier { return Barrier(e.epoch.Add(1) - 1) }

// CommitThrough is [Engine.Commit] restricted to the keys observed New
// before barrier b (see [Engine.Barrier]): they become durable together
// with checkpoint; keys observed after b stay in flight. Under
// [Options.ExplicitDone] it takes the keys Done before b. Concurrent
// commits share one write, as [Engine.Commit] says.
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
		// checkpoint of the last request queued that gave one: the state
		// the calls would leave had they run one after the other in the
		// order they queued.
		var limit uint64
		var cp []byte
		for _, r := range group {
			limit = max(limit, r.limit)
			if r.cp != nil {
				cp = r.cp
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
		s.roll(e.epoch.Load())
		s.committing = s.takeThrough(limit)
		if len(s.committing) == 0 && s.inflight.n == 0 {
			s.idle()
		}
		if s.undone != nil {
			s.undone.shrink(e.exactMode)
		}
		if e.exactMode {
			s.budget = recentBudget(s.filterBytes())
			s.makeRoom()
		}
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
		var fresh []*recentSet
		if err == nil && e.exactMode {
			// Outside the lock: only the leader reads and writes these.
			fresh = s.compactCommitted()
		}
		s.mu.Lock()
		if err != nil {
			// Not durable: back in flight, for a later Commit.
			s.older = append(s.committing, s.older...)
		} else {
			if aerr := s.addCommitted(now, fresh); aerr != nil && addErr == nil {
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
