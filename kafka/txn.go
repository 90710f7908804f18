package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// end ends the open transaction (committing if commit and nothing failed),
// then commits the engines of the staged partitions, or releases their new
// keys if the transaction did not commit.
func (c *Consumer) end(sess *kgo.GroupTransactSession, commit bool) error {
	ctx, cancel := context.WithTimeout(c.endCtx, c.cfg.TransactionTimeout)
	defer cancel()
	// Flush first and look at every record's outcome: End would commit a
	// transaction whose records failed with a non-retriable error (a
	// policy violation, a record too large), losing them.
	if commit {
		if err := sess.Client().Flush(ctx); err != nil {
			c.logf("kafka: aborting the transaction: flush: %v", err)
			commit = false
		}
	}
	if p := c.produceErr.Load(); p != nil {
		c.logf("kafka: aborting the transaction: produce: %v", *p)
		commit = false
	}
	committed, err := sess.End(ctx, kgo.TransactionEndTry(commit))
	staged := c.staged
	c.staged = c.staged[:0]
	if err != nil || !committed {
		c.stats.aborted.Add(1)
		confirmed := err == nil && commit && c.abortConfirmed(ctx, staged)
		c.release(staged)
		if confirmed {
			// The group moved on under the transaction (a rebalance in
			// which this instance gave up nothing still bumps the
			// generation, and the offset commit fails with
			// ILLEGAL_GENERATION): nothing of it was committed, End has
			// rewound the input to the committed offsets, and the records
			// are decided again in the next transaction.
			c.logf("kafka: transaction aborted by the group (a rebalance); its %d records are read again", c.txnRecords)
			return nil
		}
		// With an InstanceID the transactional ID is the instance's own, so
		// a producer fenced by a newer one means another process runs with
		// this InstanceID: rejoining would take the instance back from it
		// and the two would fence each other in turn.
		if errors.Is(err, kerr.FencedInstanceID) || (c.cfg.InstanceID != "" && errors.Is(err, kerr.ProducerFenced)) {
			return c.fenced(err)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrTxn, err)
		}
		if commit {
			// An abort we did not ask for: an EndTxn whose outcome the
			// client could not confirm may leave the transaction open on
			// the broker. A new session's InitProducerID (same
			// transactional ID) fences and aborts it before anything else
			// is written.
			return fmt.Errorf("%w: aborted", ErrTxn)
		}
		return nil
	}
	c.stats.committed.Add(1)
	c.stats.committedRecords.Add(uint64(c.txnRecords))
	c.stats.news.Add(c.txnNews)
	c.stats.dups.Add(c.txnDups)
	c.stats.rejected.Add(c.txnRejected)
	if c.testHook != nil {
		if err := c.testHook("after-end"); err != nil {
			return err
		}
	}
	// The transaction is durable: now, and only now, may the engines
	// commit its keys (E <= C, rule 1 of the package doc). Each partition
	// marks them with a barrier; the engines commit through their barriers
	// in rounds (see commitRound), beside the loop. Until then the keys
	// are in flight: their repeats are reported InFlight, dropped as
	// duplicates, which they are.
	for _, pt := range staged {
		pt.pendingCP = checkpoint{Offset: pt.next, Millis: pt.lastMs}.encode()
		pt.barrier = pt.eng.Barrier()
		pt.pendingKeys += len(pt.news)
		if !pt.dirty {
			pt.dirty = true
			c.dirty = append(c.dirty, pt)
		}
		c.inFlight = max(c.inFlight, pt.pendingKeys)
		pt.news = pt.news[:0]
		pt.next = -1
	}
	if time.Since(c.lastRound) >= c.cfg.EngineCommitInterval || c.inFlight >= c.engine.MaxInFlight/2 {
		return c.commitRound(false)
	}
	return nil
}

// abortConfirmed asks the group coordinator, once pending transactions
// are resolved, whether the transaction End reported aborted left the
// group's offsets short of its own for every staged partition: then it did
// not commit. franz-go reports an abort without an error both when it
// ended the transaction with an abort and when a commit's outcome was left
// unknown (an EndTxn that failed after reaching the coordinator); only the
// first may be followed by the next transaction as if nothing happened.
func (c *Consumer) abortConfirmed(ctx context.Context, staged []*partition) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	offs, err := c.admin.FetchOffsets(kadm.RequireStable(ctx), c.cfg.Group)
	if err != nil {
		c.logf("kafka: after an abort, read the group's offsets: %v", err)
		return false
	}
	for _, pt := range staged {
		o, ok := offs.Lookup(pt.topic, pt.part)
		if ok && o.Err != nil {
			c.logf("kafka: after an abort, read the offset of %s: %v", pt.tp, o.Err)
			return false
		}
		if ok && o.At >= pt.next {
			return false
		}
	}
	return true
}

// commitRound commits every engine holding keys of committed transactions
// through its barrier, in parallel; with wait it returns when they are
// done, else it lets them run beside the loop. The previous round must
// have finished first, so at most one is outstanding.
func (c *Consumer) commitRound(wait bool) error {
	if err := c.waitCommits(); err != nil {
		return err
	}
	c.lastRound = time.Now()
	c.inFlight = 0
	for _, pt := range c.dirty {
		b, cp := pt.barrier, pt.pendingCP
		pt.dirty, pt.pendingKeys = false, 0
		c.commits.Add(1)
		go func() {
			defer c.commits.Done()
			if err := pt.eng.CommitThrough(b, cp); err != nil {
				c.commitErr.CompareAndSwap(nil, &err)
			}
		}()
	}
	clear(c.dirty)
	c.dirty = c.dirty[:0]
	if wait {
		return c.waitCommits()
	}
	return nil
}

// waitCommits waits for the engines' outstanding commits and returns the
// first error among them.
func (c *Consumer) waitCommits() error {
	c.commits.Wait()
	if p := c.commitErr.Swap(nil); p != nil {
		return fmt.Errorf("kafka: commit engine: %w", *p)
	}
	return nil
}

// release forgets the new keys staged in an aborted transaction: the
// session rewinds to the committed offsets and decides them again.
func (c *Consumer) release(staged []*partition) {
	for _, pt := range staged {
		for _, k := range pt.news {
			if err := pt.eng.Forget(k); err != nil && !errors.Is(err, dedup.ErrNotInFlight) {
				c.logf("kafka: forget on abort %s: %v", pt.tp, err)
			}
		}
		clear(pt.news)
		pt.news = pt.news[:0]
		pt.next = -1
	}
}
