package dedup

import (
	"cmp"
	"context"
	"math"
	"time"
)

type commitReq struct {
	limit uint64 // commit the keys of epochs <= limit
	// rank orders the checkpoints of concurrent commits: 2b+1 for
	// CommitThrough(b, cp), 2e for a Commit that began while the epoch was
	// e. The durable checkpoint is that of the highest rank written so far.
	rank uint64
	cp   []byte
	err  error
	done chan struct{}
}

// Commit makes every key observed New since the last commit durable,
// together with checkpoint, in one atomic, fsynced step, and returns once
// it is. After a crash, committed keys are remembered, keys in flight are
// not, and Checkpoint returns the last committed checkpoint. A nil
// checkpoint keeps the previous one. Under [Options.ExplicitDone] Commit
// makes durable only the keys Done; the others stay in flight.
//
// Concurrent commits (Commit and CommitThrough) share one write: the
// commits that arrive while one is writing queue, and the next write takes
// them all, through the furthest barrier among them. The checkpoint a
// commit leaves is paired with the furthest point it covers, and never
// moves back:
//
//   - [Engine.CommitThrough](b, cp) ranks by its barrier b: of all the
//     checkpoints written, the durable one is that of the furthest barrier
//     (a nil checkpoint does not count). A CommitThrough whose barrier is
//     behind one already committed with a checkpoint returns once its keys
//     are durable and leaves that later checkpoint in place.
//   - Commit ranks by the moment it begins: after every Barrier taken
//     before it and before every Barrier taken after it; of plain Commits
//     that begin between the same two Barriers, the one that queues last
//     wins.
//
// So one loop that commits, or goroutines that take [Engine.Barrier] and
// their checkpoint under one lock and then call CommitThrough, always
// leave a checkpoint that covers every durable key. Goroutines that call
// plain Commit concurrently with checkpoints describing their output get
// no such pairing (the engine cannot know which checkpoint covers which
// key): they take a Barrier under the lock that orders their checkpoints
// and call CommitThrough, or commit from one goroutine.
//
// Commit is [Engine.CommitContext] with [context.Background].
func (e *Engine) Commit(checkpoint []byte) error {
	return e.CommitContext(context.Background(), checkpoint)
}

// CommitContext is [Engine.Commit] bounded by ctx: if ctx is done before
// the commit is durable it returns an error wrapping ctx.Err() at once.
// The write may still happen after that (its keys become durable with the
// checkpoint, as Commit says), as it may after a crash in the middle of a
// commit: the caller treats the outcome as unknown, and keys Done under
// [Options.ExplicitDone] stay Done either way.
func (e *Engine) CommitContext(ctx context.Context, checkpoint []byte) error {
	if err := e.lockCommit(); err != nil {
		return err
	}
	defer e.lifecycle.RUnlock()
	return e.commit(ctx, math.MaxUint64, 2*e.epoch.Load(), checkpoint)
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
// side. Barriers are ordered: one taken later covers every key an earlier
// one covers, and its checkpoint wins over theirs (see [Engine.Commit]). A
// worker pool takes the Barrier under the lock that orders its output and
// Done calls (see the package doc, "Worker pools", and [Pool], which does
// it for you).
func (e *Engine) Barrier() Barrier { return Barrier(e.epoch.Add(1) - 1) }

// CommitThrough is [Engine.Commit] restricted to the keys observed New
// before barrier b (see [Engine.Barrier]): they become durable together
// with checkpoint; keys observed after b stay in flight. Under
// [Options.ExplicitDone] it takes the keys Done before b. Concurrent
// commits share one write, and the durable checkpoint is that of the
// furthest barrier committed, as [Engine.Commit] says: a call whose
// barrier is behind returns nil once its keys are durable, its checkpoint
// superseded.
//
// CommitThrough is [Engine.CommitThroughContext] with
// [context.Background].
func (e *Engine) CommitThrough(b Barrier, checkpoint []byte) error {
	return e.CommitThroughContext(context.Background(), b, checkpoint)
}

// CommitThroughContext is [Engine.CommitThrough] bounded by ctx, as
// [Engine.CommitContext] is.
func (e *Engine) CommitThroughContext(ctx context.Context, b Barrier, checkpoint []byte) error {
	if err := e.lockCommit(); err != nil {
		return err
	}
	defer e.lifecycle.RUnlock()
	return e.commit(ctx, uint64(b), 2*uint64(b)+1, checkpoint)
}

// lockCommit takes the lifecycle's read lock for a commit, or returns why
// the engine takes no commit (failed, closed) with the lock not held.
func (e *Engine) lockCommit() error {
	if err := e.usable(); err != nil {
		return err
	}
	e.lifecycle.RLock()
	if e.closed.Load() {
		e.lifecycle.RUnlock()
		return ErrClosed
	}
	return nil
}

// commit queues a commit request; the first caller to find no leader
// becomes it and commits for every request queued meanwhile. A caller
// whose ctx can end hands the leading to a goroutine of its own, so that
// it can return when ctx ends while the write goes on for the others.
func (e *Engine) commit(ctx context.Context, limit, rank uint64, checkpoint []byte) error {
	req := &commitReq{limit: limit, rank: rank, done: make(chan struct{})}
	if checkpoint != nil {
		req.cp = append([]byte{}, checkpoint...)
	}
	e.cmu.Lock()
	e.cqueue = append(e.cqueue, req)
	lead := !e.cleader
	if lead {
		e.cleader = true
		e.leading.Add(1)
	}
	e.cmu.Unlock()
	if ctx.Done() == nil {
		if lead {
			e.lead()
		}
		<-req.done
		return req.err
	}
	if lead {
		go e.lead()
	}
	select {
	case <-req.done:
		return req.err
	case <-ctx.Done():
		return wrap(ctx.Err(), "commit: the write may still happen")
	}
}

// lead writes the queued commits, group after group, until none is left.
// The caller set cleader and counted itself in leading.
func (e *Engine) lead() {
	defer e.leading.Done()
	e.cmu.Lock()
	for len(e.cqueue) > 0 {
		group := e.cqueue
		e.cqueue = nil
		e.cmu.Unlock()
		// One write for the group, through its furthest barrier, with the
		// checkpoint of the highest rank that gave one (the later one of
		// equal ranks), if it is not behind the durable one.
		var limit uint64
		var best *commitReq
		for _, r := range group {
			limit = max(limit, r.limit)
			if r.cp != nil && (best == nil || r.rank >= best.rank) {
				best = r
			}
		}
		var cp []byte
		var rank uint64
		if best != nil {
			e.cpMu.Lock()
			if best.rank >= e.cpRank {
				cp, rank = best.cp, best.rank
			}
			e.cpMu.Unlock()
		}
		err := e.commitOnce(limit, cp, rank)
		for _, r := range group {
			r.err = err
			close(r.done)
		}
		e.cmu.Lock()
	}
	e.cleader = false
	e.cmu.Unlock()
	e.autoAfterCommit()
}

// commitOnce writes the keys in flight and cp (of rank rank) in one batch. Keys stay
// visible as InFlight (in the shards' committing sets) until the batch is
// durable and they are in their filters, so no Observe sees a gap.
func (e *Engine) commitOnce(limit uint64, cp []byte, rank uint64) error {
	e.commitGate.Lock()
	defer e.commitGate.Unlock()
	start := time.Now()
	now := e.opts.Now()
	oldest := e.timing.OldestLive(now)
	batch := e.store.NewBatch()
	n, renewals := 0, 0
	for i := range e.shards {
		s := &e.shards[i]
		s.mu.Lock()
		s.roll(e.epoch.Load())
		s.committing = s.takeThrough(limit)
		renewals += s.takeRenewals()
		if len(s.committing) == 0 && s.inflight.n == 0 {
			s.idle()
		}
		if s.undone != nil {
			s.undone.shrink(e.exactMode)
		}
		if e.exactMode {
			// In memory (no Dir) a store lookup is a probe of a table
			// in memory, as cheap as the cache's: keep no cache.
			s.budget = 0
			if e.opts.Dir != "" {
				s.budget = recentBudget(s.filterBytes())
			}
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
		if e.logCommits {
			s.renewingEach(func(h uint64, key []byte, gen uint64) {
				if gen >= oldest {
					batch.Add(gen, key, h)
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
	// The filters take the keys still live when the write is done: under
	// event time the clock may have gone far past now meanwhile, and a
	// generation that expired since must not be created again.
	if later := e.opts.Now(); later.After(now) {
		now = later
	}
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
		if len(s.renewing) > 0 {
			gone, rerr := e.settleRenewals(s, err == nil, s.ring.OldestLive(now))
			e.inflightCount.Add(-int64(gone))
			addErr = cmp.Or(addErr, rerr)
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
		e.cpRank = rank
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
