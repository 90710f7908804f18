package dedup

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// PoolOptions configure a [Pool] of events of type T. Key and Process are
// required; every other zero field selects its documented default.
type PoolOptions[T any] struct {
	// Workers is the number of goroutines that process events. Default
	// runtime.GOMAXPROCS(0).
	Workers int

	// Key returns the dedup key of an event. Required.
	Key func(ev T) []byte

	// Process does the work of an event whose key is New, concurrently
	// with the other workers, with a context that ends when the pool is
	// closed early or fails. An error makes the pool Forget the key and
	// try the event again later, up to Attempts times; then the pool
	// stops with that error (an event is never dropped). To skip an event
	// for good, Process records it where it must (a dead-letter output)
	// and returns nil. Required.
	Process func(ctx context.Context, ev T) error

	// Output, if not nil, writes the effect of a processed event that the
	// checkpoint must cover (a line appended to a file, say). The pool
	// calls it under its ordering lock, one event at a time, right before
	// Done: the output, the key's Done and the event's completion are one
	// step, so a commit covers exactly the keys whose output its
	// checkpoint covers. An error stops the pool. Default nil: nothing
	// beyond Process.
	Output func(ev T) error

	// Checkpoint returns the checkpoint of a commit, given resume, the
	// source position below which every event is complete (the position
	// Submit gave with the last of them). It runs under the ordering lock,
	// so it sees exactly the outputs the commit covers: flush a buffered
	// output here and add its length to the checkpoint. Default: the
	// decimal text of resume (strconv.ParseInt reads it back).
	Checkpoint func(resume int64) ([]byte, error)

	// Sync, if not nil, runs outside the lock before each commit, after
	// Checkpoint: make the output that Checkpoint covers durable (an
	// os.File's Sync). Default nil.
	Sync func() error

	// Committed, if not nil, is called after each commit returns, with its
	// checkpoint, outside the lock, one call at a time (to log progress,
	// or acknowledge the source). Default nil.
	Committed func(checkpoint []byte)

	// CommitEvery is the number of completed events (processed or
	// Duplicate) after which the pool commits. Default 5000.
	CommitEvery int

	// CommitInterval is the longest time completed events wait for a
	// commit. Default 1s.
	CommitInterval time.Duration

	// Attempts is how many times Process may fail for one event before the
	// pool stops. Default 3.
	Attempts int

	// MaxPending bounds the events submitted and not yet below the
	// watermark: Submit waits while that many are. Default 65536.
	MaxPending int

	// RetryDelay is how long an event waits before it is tried again when
	// its key is in flight with an owner outside the pool (another user
	// of the engine), or when the engine holds Options.MaxInFlight keys.
	// Events whose key another worker of the pool owns wait for that
	// worker instead, and are not delayed. Default 1ms.
	RetryDelay time.Duration
}

// Pool runs the worker-pool recipe of the package doc ("Worker pools") on
// an engine opened with [Options.ExplicitDone]: the caller submits events
// in source order with their source position; workers observe each key,
// Process the New ones, write their Output and call [Engine.Done] under
// one ordering lock, and mark them complete; a commit every CommitEvery
// completions or CommitInterval takes the low watermark (the position
// below which every event is complete), the Checkpoint under the same
// lock, an [Engine.Barrier], then [Engine.CommitThroughContext] outside
// it. An event whose key another worker owns waits, parked, until that
// worker is Done (then it is a Duplicate) or has forgotten the key (then
// it is tried again); no worker sleeps or spins on [InFlight].
//
// After a restart, resume the source from the position the checkpoint
// records (and truncate the output to what it records): every event is
// then processed exactly once, its output written exactly once.
//
// A Pool's methods are safe for concurrent use; Submit's order is the
// source order.
type Pool[T any] struct {
	e      *Engine
	o      PoolOptions[T]
	ctx    context.Context // the workers': cancelled by Close or a failure
	cancel context.CancelFunc
	// commitCtx bounds the commit loop's commits: cancelled by a failure
	// or a Close whose context ended.
	commitCtx    context.Context
	commitCancel context.CancelFunc

	jobs  chan uint64   // events to try, by sequence number
	retry chan uint64   // events to try again: taken before jobs, they hold the watermark back
	slots chan struct{} // one token per pending event: MaxPending in all

	// mu is the ordering lock: it guards the ring, the watermark and the
	// counters below, and orders Output, Done and the commit's Barrier.
	mu        sync.Mutex
	ring      []poolSlot[T] // pending events, by sequence number mod len
	low, next uint64        // every event below low is complete; next is the next sequence number
	resume    int64         // the position given with event low-1
	hasResume bool          // some event is below low
	since     int           // completions since the last commit
	closing   bool
	allDone   chan struct{} // closed once closing and every event is complete

	// claims holds the keys the pool's workers own (observing or
	// processing), with the events parked behind each, under cmu.
	cmu    sync.Mutex
	claims map[string][]uint64

	kick    chan struct{} // CommitEvery completions since the last commit
	stop    chan struct{} // closed by Close: the commit loop commits once more and ends
	workers sync.WaitGroup
	loop    chan struct{} // closed when the commit loop has ended

	errOnce sync.Once
	failed  chan struct{} // closed with err set
	err     error
}

// poolSlot is one pending event. ev and pos are written by Submit before
// the event is sent to a worker; attempts only by the worker holding it;
// complete under mu.
type poolSlot[T any] struct {
	ev       T
	pos      int64
	attempts int
	complete bool
}

// NewPool starts a pool of workers over e, which must have been opened
// with [Options.ExplicitDone]. Submit events to it; Close it to drain them
// and commit.
func NewPool[T any](e *Engine, opts PoolOptions[T]) (*Pool[T], error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if !e.opts.ExplicitDone {
		return nil, fmt.Errorf("%w: a Pool needs it, so that a commit takes only the keys whose work is done", ErrNoExplicitDone)
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: PoolOptions.%s %s", ErrInvalidOptions, field, fmt.Sprintf(format, args...)))
	}
	if opts.Key == nil {
		bad("Key", "is required")
	}
	if opts.Process == nil {
		bad("Process", "is required")
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"Workers", &opts.Workers, runtime.GOMAXPROCS(0)},
		{"CommitEvery", &opts.CommitEvery, 5000},
		{"Attempts", &opts.Attempts, 3},
		{"MaxPending", &opts.MaxPending, 1 << 16},
	} {
		if *f.v < 0 {
			bad(f.name, "must not be negative, got %d", *f.v)
		} else if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"CommitInterval", &opts.CommitInterval, time.Second},
		{"RetryDelay", &opts.RetryDelay, time.Millisecond},
	} {
		if *f.v < 0 {
			bad(f.name, "must not be negative, got %v", *f.v)
		} else if *f.v == 0 {
			*f.v = f.def
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.Checkpoint == nil {
		opts.Checkpoint = func(resume int64) ([]byte, error) { return strconv.AppendInt(nil, resume, 10), nil }
	}
	p := &Pool[T]{
		e: e, o: opts,
		jobs:    make(chan uint64, opts.MaxPending),
		retry:   make(chan uint64, opts.MaxPending),
		slots:   make(chan struct{}, opts.MaxPending),
		ring:    make([]poolSlot[T], opts.MaxPending),
		allDone: make(chan struct{}),
		claims:  make(map[string][]uint64),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		loop:    make(chan struct{}),
		failed:  make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.commitCtx, p.commitCancel = context.WithCancel(context.Background())
	for range opts.Workers {
		p.workers.Add(1)
		go p.work()
	}
	go p.commitLoop()
	return p, nil
}

// Submit gives the pool event ev, the next in source order; pos is the
// source position after it: where the source resumes once ev and every
// event before it are complete. It waits while MaxPending events are
// pending, until ctx ends. It returns the pool's error once the pool has
// failed, and ErrPoolClosed once Close has begun.
func (p *Pool[T]) Submit(ctx context.Context, ev T, pos int64) error {
	select {
	case <-p.failed:
		return p.err
	default:
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.failed:
		return p.err
	}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		<-p.slots
		return ErrPoolClosed
	}
	seq := p.next
	p.next++
	p.ring[seq%uint64(len(p.ring))] = poolSlot[T]{ev: ev, pos: pos}
	p.mu.Unlock()
	p.jobs <- seq // never blocks: jobs and retry hold at most the pending events
	return nil
}

// Close stops taking events, waits until every event submitted is
// complete, commits them, and stops the workers. If ctx ends first, the
// workers' context is cancelled, the events complete so far are committed
// (the write may finish after Close returns, see
// [Engine.CommitThroughContext]) and Close returns ctx's error; the
// events not complete are read again after a restart, from the
// checkpoint. Close returns the pool's error if it failed. It does not
// close the engine.
func (p *Pool[T]) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return ErrPoolClosed
	}
	p.closing = true
	if p.low == p.next {
		close(p.allDone)
	}
	p.mu.Unlock()
	var ctxErr error
	select {
	case <-p.allDone:
	case <-p.failed:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		p.commitCancel()
	}
	// Workers first, so that the last commit sees every event they
	// complete; a worker cancelled in Process forgets its key.
	p.cancel()
	p.workers.Wait()
	var commitErr error
	select {
	case <-p.failed:
	default:
		close(p.stop)
		<-p.loop
		commitErr = p.commit(ctx)
	}
	p.commitCancel()
	select {
	case <-p.failed:
		return errors.Join(p.err, ctxErr)
	default:
	}
	if ctxErr != nil && errors.Is(commitErr, ctxErr) {
		return ctxErr
	}
	return errors.Join(ctxErr, commitErr)
}

// fail stops the pool with err (the first error wins).
func (p *Pool[T]) fail(err error) {
	p.errOnce.Do(func() {
		p.err = err
		close(p.failed)
		p.cancel()
		p.commitCancel()
	})
}

// work takes events until the workers' context ends.
func (p *Pool[T]) work() {
	defer p.workers.Done()
	for {
		select {
		case seq := <-p.retry:
			p.try(seq)
			continue
		default:
		}
		select {
		case <-p.ctx.Done():
			return
		case seq := <-p.retry:
			p.try(seq)
		case seq := <-p.jobs:
			p.try(seq)
		}
	}
}

// try handles event seq once: parks it behind the worker that owns its
// key, or observes the key and acts on the verdict.
func (p *Pool[T]) try(seq uint64) {
	slot := &p.ring[seq%uint64(len(p.ring))]
	key := p.o.Key(slot.ev)
	claim := string(key)
	p.cmu.Lock()
	if parked, owned := p.claims[claim]; owned {
		p.claims[claim] = append(parked, seq)
		p.cmu.Unlock()
		return
	}
	p.claims[claim] = nil
	p.cmu.Unlock()
	defer p.release(claim)

	v, err := p.e.Observe(key)
	switch {
	case errors.Is(err, ErrTooManyInFlight):
		// Done keys wait for a commit: ask for one, try again shortly.
		p.requestCommit()
		p.retryLater(seq)
		return
	case err != nil:
		p.fail(fmt.Errorf("dedup: pool: observe %q: %w", key, err))
		return
	case v == Duplicate:
		p.mu.Lock()
		p.completeLocked(seq)
		p.mu.Unlock()
		return
	case v == InFlight:
		// Owned outside the pool: its owner may still Forget it.
		p.retryLater(seq)
		return
	}
	if err := p.o.Process(p.ctx, slot.ev); err != nil {
		if ferr := p.e.Forget(key); ferr != nil {
			p.fail(fmt.Errorf("dedup: pool: forget %q after Process failed (%v): %w", key, err, ferr))
			return
		}
		if p.ctx.Err() != nil {
			return // closing early or failed: the event stays incomplete
		}
		if slot.attempts++; slot.attempts >= p.o.Attempts {
			p.fail(fmt.Errorf("dedup: pool: Process failed %d times for key %q: %w", slot.attempts, key, err))
			return
		}
		p.retry <- seq
		return
	}
	p.mu.Lock()
	var oerr error
	if p.o.Output != nil {
		oerr = p.o.Output(slot.ev)
	}
	if oerr == nil {
		if err := p.e.Done(key); err != nil {
			p.mu.Unlock()
			p.fail(fmt.Errorf("dedup: pool: done %q: %w", key, err))
			return
		}
		p.completeLocked(seq)
	}
	p.mu.Unlock()
	if oerr != nil {
		// The output may hold part of the event: stop, the checkpoint of
		// the last commit covers what is whole.
		_ = p.e.Forget(key)
		p.fail(fmt.Errorf("dedup: pool: output of key %q: %w", key, oerr))
	}
}

// release gives up the claim on a key and tries the events parked behind
// it again: they find the key Done (Duplicate) or forgotten (New).
func (p *Pool[T]) release(claim string) {
	p.cmu.Lock()
	parked := p.claims[claim]
	delete(p.claims, claim)
	p.cmu.Unlock()
	for _, seq := range parked {
		p.retry <- seq
	}
}

// retryLater sends event seq to the workers again after RetryDelay.
func (p *Pool[T]) retryLater(seq uint64) {
	time.AfterFunc(p.o.RetryDelay, func() { p.retry <- seq })
}

// completeLocked marks event seq complete and advances the watermark.
func (p *Pool[T]) completeLocked(seq uint64) {
	n := uint64(len(p.ring))
	p.ring[seq%n].complete = true
	for p.low < p.next && p.ring[p.low%n].complete {
		s := &p.ring[p.low%n]
		p.resume, p.hasResume = s.pos, true
		*s = poolSlot[T]{}
		p.low++
		<-p.slots
	}
	p.since++
	if p.since >= p.o.CommitEvery {
		p.requestCommit()
	}
	if p.closing && p.low == p.next {
		close(p.allDone)
	}
}

// requestCommit wakes the commit loop.
func (p *Pool[T]) requestCommit() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// commitLoop commits on request and every CommitInterval until Close.
func (p *Pool[T]) commitLoop() {
	defer close(p.loop)
	t := time.NewTicker(p.o.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.failed:
			return
		case <-p.kick:
		case <-t.C:
		}
		if err := p.commit(p.commitCtx); err != nil {
			if p.commitCtx.Err() == nil {
				p.fail(err)
			}
			return
		}
	}
}

// commit makes the events complete so far durable: the checkpoint and a
// Barrier under the ordering lock, Sync and CommitThroughContext outside
// it. Nothing to commit (no completion since the last commit, or none
// below the watermark yet) is not an error.
func (p *Pool[T]) commit(ctx context.Context) error {
	p.mu.Lock()
	if p.since == 0 || !p.hasResume {
		p.mu.Unlock()
		return nil
	}
	cp, err := p.o.Checkpoint(p.resume)
	if err != nil {
		p.mu.Unlock()
		return fmt.Errorf("dedup: pool: checkpoint: %w", err)
	}
	b := p.e.Barrier()
	p.since = 0
	p.mu.Unlock()
	if p.o.Sync != nil {
		if err := p.o.Sync(); err != nil {
			return fmt.Errorf("dedup: pool: sync: %w", err)
		}
	}
	if err := p.e.CommitThroughContext(ctx, b, cp); err != nil {
		return err
	}
	if p.o.Committed != nil {
		p.o.Committed(cp)
	}
	return nil
}
