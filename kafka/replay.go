package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/fsperm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// replayCommitEvery bounds the keys a replay holds in flight: it commits
// the engine, with the replay's position, this often.
const replayCommitEvery = 50000

// replayIdle is how long a replay waits for records before asking the
// broker whether the rest of its range holds any.
const replayIdle = 2 * time.Second

// adjust runs after the group's committed offsets are fetched and before
// the newly assigned partitions are fetched: it makes each one's engine
// current (rule 3 of the package doc) and leaves the offsets as they are.
// It runs beside the poll loop, which goes on with the other partitions;
// ctx is canceled when a new rebalance begins.
func (c *Consumer) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	type job struct {
		t tp
		C int64
	}
	var jobs []job
	c.warnGrown(offsets)
	for topic, ps := range offsets {
		for p, off := range ps {
			committed := off.EpochOffset().Offset
			if committed < 0 {
				committed = -1 // no commit: the reset offset (the log start)
			}
			jobs = append(jobs, job{tp{topic, p}, committed})
		}
	}
	// Partitions are made ready in parallel, a few at a time: a replay is
	// mostly the engine's work on one core.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs <- ctx.Err()
				return
			}
			defer func() { <-sem }()
			if err := c.prepare(ctx, j.t, j.C); err != nil {
				c.logf("kafka: prepare %s: %v", j.t, err)
				c.dropUnready(j.t)
				errs <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return offsets, nil
}

// dropUnready closes t's engine if it is open and not ready: a prepare
// that failed (a rebalance canceled it, or the partition was revoked
// under it) must not leave an engine behind that no revoke will close.
// Its state is on disk; the next assignment opens it again.
func (c *Consumer) dropUnready(t tp) {
	c.mu.Lock()
	pt := c.parts[t]
	if pt == nil || pt.ready {
		c.mu.Unlock()
		return
	}
	delete(c.parts, t)
	c.mu.Unlock()
	if err := pt.eng.Close(); err != nil {
		c.logf("kafka: close %s after a failed prepare: %v", t, err)
	}
}

// warnGrown warns when a partition assigned lies beyond the input's
// partition count last seen: partitions were added to the input, and a
// producer partitioning by key now sends some keys to another partition,
// whose engine has not seen them, so they can be written again.
func (c *Consumer) warnGrown(offsets map[string]map[int32]kgo.Offset) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inputPartitions == 0 {
		return
	}
	top := c.inputPartitions
	for p := range offsets[c.cfg.Topic] {
		top = max(top, p+1)
	}
	if top > c.inputPartitions {
		c.logf("kafka: warning: input topic %s grew from %d to at least %d partitions: keys the producers now send to another partition than before can be written to the output again (duplicates are found within a partition)", c.cfg.Topic, c.inputPartitions, top)
		c.inputPartitions = top
	}
}

// windowStart is rebuildFrom's answer, looked up beside the engine's
// open: a partition that is not current needs it, and the two take a
// broker round trip and a state directory's open.
type windowStart struct {
	done chan struct{}
	from int64
	err  error
}

// lookupWindowStart starts rebuildFrom(ctx, t, C); stop cancels it and
// waits for it.
func (c *Consumer) lookupWindowStart(ctx context.Context, t tp, C int64) (w *windowStart, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	w = &windowStart{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.from, w.err = c.rebuildFrom(ctx, t, C)
	}()
	return w, func() { cancel(); <-w.done }
}

// get waits for the answer.
func (w *windowStart) get(ctx context.Context) (int64, error) {
	select {
	case <-w.done:
		return w.from, w.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// prepare opens t's engine and brings it to the committed offset C.
func (c *Consumer) prepare(ctx context.Context, t tp, C int64) error {
	start := time.Now()
	var ws *windowStart
	if C > 0 {
		// Most partitions assigned after a move need it; one whose state
		// is current drops it.
		var stop func()
		ws, stop = c.lookupWindowStart(ctx, t, C)
		defer stop()
	}
	pt, err := c.open(t)
	if err != nil {
		return err
	}
	r := Ready{Topic: t.topic, Partition: t.part, Committed: C, Local: -1, From: -1, Imported: -1}
	cp, ok, cpErr := decodeCheckpoint(pt.eng.Checkpoint())
	if ok {
		r.Local = cp.Offset
	}
	switch {
	case cpErr != nil:
		c.logf("kafka: %s: %v; rebuilding its state", t, cpErr)
		r.Rebuilt = true
	case C < 0 && ok:
		// The group has no offset for a partition this state has seen:
		// its offsets were deleted or expired. Start over with it.
		c.logf("kafka: %s: local state at offset %d but the group has no committed offset; wiping it", t, cp.Offset)
		r.Rebuilt = true
	case ok && cp.Offset > C:
		c.logf("kafka: %s: local state at offset %d is ahead of the group's %d (offsets reset or topic recreated); rebuilding it", t, cp.Offset, C)
		r.Rebuilt = true
	case ok && cp.Offset == C:
		// Current.
	case ok:
		r.From = cp.Offset
	case C >= 0:
		r.Rebuilt = true
	}
	if r.Rebuilt && ok || cpErr != nil {
		if pt, err = c.wipe(pt); err != nil {
			return err
		}
	}
	if c.cfg.Handover != nil && C > 0 && (r.Rebuilt || r.From >= 0) {
		npt, imported, reason, err := c.tryImport(ctx, pt, C, r.From, ws)
		if npt == nil {
			return err
		}
		replaced := npt != pt
		pt = npt
		if err != nil {
			return err
		}
		r.Fallback = reason
		switch {
		case imported >= 0:
			r.Imported, r.From, r.Rebuilt = imported, imported, false
		case replaced:
			r.From, r.Rebuilt = -1, true // a failed import left an empty state
		}
	}
	if C > 0 && (r.Rebuilt || r.From >= 0) {
		if r.Imported < 0 {
			// An import is within the window: tryImport checked.
			from, err := ws.get(ctx)
			if err != nil {
				return err
			}
			if from > r.From {
				r.From = from
			}
		}
		n, err := c.replay(ctx, pt, r.From, C)
		r.Replayed = n
		if err != nil {
			return err
		}
	}
	if C >= 0 {
		if err := pt.eng.Commit(checkpoint{Offset: C, Millis: pt.clock.Load()}.encode()); err != nil {
			return fmt.Errorf("kafka: commit %s at %d: %w", t, C, err)
		}
	}
	pt.next = -1
	c.mu.Lock()
	pt.ready = true
	pt.lastExport = time.Now()
	c.mu.Unlock()
	r.Took = time.Since(start)
	if r.Imported >= 0 {
		c.logf("kafka: %s ready: committed %d, imported %d, replayed %d records from %d in %v", t, C, r.Imported, r.Replayed, r.From, r.Took)
	} else if r.Replayed > 0 || r.Rebuilt {
		c.logf("kafka: %s ready: committed %d, local %d, replayed %d records from %d in %v", t, C, r.Local, r.Replayed, r.From, r.Took)
	} else {
		c.logf("kafka: %s ready: committed %d, local state current", t, C)
	}
	if c.cfg.OnReady != nil {
		c.cfg.OnReady(r)
	}
	return nil
}

// open returns t's engine, opening its state directory if it is not open.
func (c *Consumer) open(t tp) (*partition, error) {
	c.mu.Lock()
	pt := c.parts[t]
	c.mu.Unlock()
	if pt != nil {
		return pt, nil
	}
	if err := fsperm.MkdirAll(c.cfg.StateDir); err != nil {
		return nil, c.permanent(fmt.Errorf("kafka: state directory: %w", err))
	}
	pt, err := c.openState(t)
	if err != nil {
		return nil, c.permanent(fmt.Errorf("kafka: open state of %s: %w", t, err))
	}
	c.register(pt)
	return pt, nil
}

// openState opens t's engine, not yet registered in c.parts.
func (c *Consumer) openState(t tp) (*partition, error) {
	pt := &partition{tp: t, next: -1}
	pt.lag.Store(-1)
	pt.exported.Store(-1)
	opts := c.engine
	opts.Dir = c.dir(t)
	// The window runs on the records' timestamps (event time): a key still
	// in flight past its window, as a replay or a lagging commit leaves
	// it, is New again, and the clock never moves back.
	opts.EventTime = true
	opts.Now = nil
	if c.cfg.Logf != nil && opts.Logf == nil {
		opts.Logf = c.cfg.Logf
	}
	eng, err := dedup.Open(opts)
	if err != nil {
		return nil, err
	}
	pt.eng = eng
	if cp, ok, _ := decodeCheckpoint(eng.Checkpoint()); ok {
		pt.clock.Store(cp.Millis)
		pt.lastMs = cp.Millis
	}
	return pt, nil
}

func (c *Consumer) register(pt *partition) {
	c.mu.Lock()
	c.parts[pt.tp] = pt
	c.mu.Unlock()
}

// permanent records err as fatal for Run and returns it.
func (c *Consumer) permanent(err error) error {
	err = &permanentError{err}
	c.setFatal(err)
	return err
}

// wipe deletes pt's state and opens an empty one in its place.
func (c *Consumer) wipe(pt *partition) (*partition, error) {
	c.mu.Lock()
	delete(c.parts, pt.tp)
	c.mu.Unlock()
	if err := pt.eng.Close(); err != nil {
		c.logf("kafka: close %s before wiping: %v", pt.tp, err)
	}
	if err := os.RemoveAll(c.dir(pt.tp)); err != nil {
		return nil, c.permanent(fmt.Errorf("kafka: wipe state of %s: %w", pt.tp, err))
	}
	return c.open(pt.tp)
}

// rebuildFrom returns the first offset whose timestamp is at least
// ts(C-1) - lookback: the keys before it have left the window by C.
func (c *Consumer) rebuildFrom(ctx context.Context, t tp, C int64) (int64, error) {
	var T int64
	err := c.read(ctx, t, C-1, C, func(rs []*kgo.Record) (bool, error) {
		T = rs[0].Timestamp.UnixMilli()
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	if T == 0 {
		T = time.Now().UnixMilli() // C-1 is a transaction marker: no record before C to go by
	}
	lo, err := c.admin.ListOffsetsAfterMilli(ctx, T-c.lookback.Milliseconds(), t.topic)
	if err != nil {
		return 0, fmt.Errorf("kafka: list offsets of %s by time: %w", t, err)
	}
	o, ok := lo.Lookup(t.topic, t.part)
	if !ok {
		return 0, fmt.Errorf("kafka: list offsets of %s by time: partition missing", t)
	}
	if o.Err != nil {
		return 0, fmt.Errorf("kafka: list offsets of %s by time: %w", t, o.Err)
	}
	from := o.Offset
	if from < 0 || from > C {
		from = C
	}
	return from, nil
}

// replay feeds the records in [from, to) of pt's partition to its engine,
// output suppressed, committing it now and then with its position.
func (c *Consumer) replay(ctx context.Context, pt *partition, from, to int64) (int64, error) {
	var n, sinceCommit int64
	err := c.read(ctx, pt.tp, from, to, func(rs []*kgo.Record) (bool, error) {
		var use []*kgo.Record
		for _, r := range rs {
			if r.Offset < to {
				use = append(use, r)
			}
		}
		if len(use) > 0 {
			if err := c.process(pt, use, false); err != nil {
				return false, err
			}
			n += int64(len(use))
			sinceCommit += int64(len(use))
			c.stats.replayed.Add(uint64(len(use)))
			pt.replayed.Add(int64(len(use)))
		}
		if sinceCommit >= replayCommitEvery {
			sinceCommit = 0
			cp := checkpoint{Offset: pt.next, Millis: pt.clock.Load()}
			if err := pt.eng.Commit(cp.encode()); err != nil {
				return false, fmt.Errorf("kafka: commit replay of %s: %w", pt.tp, err)
			}
		}
		return rs[len(rs)-1].Offset >= to-1, nil
	})
	return n, err
}

// read polls t from offset from (read_committed) and passes each non-empty
// batch to fn until fn says done, or until the range [from, to) holds no
// more records: nothing arrived for replayIdle and the partition's last
// stable offset is at least to (what is left is transaction markers or
// aborted records).
func (c *Consumer) read(ctx context.Context, t tp, from, to int64, fn func([]*kgo.Record) (bool, error)) error {
	if from >= to {
		return nil
	}
	cl, err := kgo.NewClient(c.clientOpts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t.topic: {t.part: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return fmt.Errorf("kafka: replay client: %w", err)
	}
	defer cl.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, replayIdle)
		fs := cl.PollRecords(pctx, 10000)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var rs []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) { rs = append(rs, r) })
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				c.logf("kafka: replay fetch %s: %v", t, err)
			}
		})
		if len(rs) > 0 {
			done, err := fn(rs)
			if err != nil || done {
				return err
			}
			continue
		}
		lso, err := c.admin.ListCommittedOffsets(ctx, t.topic)
		if err != nil {
			return fmt.Errorf("kafka: list stable offsets of %s: %w", t, err)
		}
		if o, ok := lso.Lookup(t.topic, t.part); ok && o.Err == nil && o.Offset >= to {
			return nil
		}
	}
}
