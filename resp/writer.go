package resp

import (
	"errors"
	"net"
	"sync"
	"time"
)

// chunkSize is the size of the blocks a reply queue holds its bytes in.
const chunkSize = 64 << 10

// chunks recycles the blocks of every connection's reply queue, so that a
// queue that fills and drains leaves no garbage behind.
var chunks = sync.Pool{New: func() any { b := make([]byte, 0, chunkSize); return &b }}

// replyQueue lets a connection's replies wait for its client without
// stopping the server from reading the client's commands: a client that
// sends a whole pipeline before reading any reply (go-redis, redis-py)
// would otherwise block the server's writes once the socket buffers are
// full, while it blocks writing its own requests, and both would wait
// until a timeout. Writes try the socket at once (writeNow, without
// blocking); what does not fit is queued, in blocks of chunkSize, for a
// goroutine that writes it as the client reads, up to Options.MaxReplyBuffer
// bytes (those being written included), past which writes block: the
// server stops reading that connection until its client reads.
type replyQueue struct {
	conn    net.Conn
	limit   int
	timeout time.Duration // for each write of the queue

	mu      sync.Mutex
	cond    sync.Cond
	queue   []*[]byte // queued blocks, in order after the one being written
	size    int       // bytes queued, the block being written included
	busy    bool      // the goroutine is writing a block taken from queue
	running bool      // the goroutine is started
	closed  bool      // no more writes: the goroutine ends when the queue is empty
	err     error     // the first write error: the connection is broken
}

func (q *replyQueue) init(conn net.Conn, limit int, timeout time.Duration) {
	q.conn, q.limit, q.timeout = conn, limit, timeout
	q.cond.L = &q.mu
}

// write writes p, or queues what the socket does not take at once.
func (q *replyQueue) write(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return 0, q.err
	}
	if q.closed {
		return 0, net.ErrClosed
	}
	n := len(p)
	if q.size == 0 {
		// Nothing is pending: the bytes go straight to the socket, as far
		// as its buffer takes them. Holding mu keeps the goroutine off.
		k, ok, err := writeNow(q.conn, p)
		if err != nil {
			q.err = err
			return k, err
		}
		if ok {
			p = p[k:]
			if len(p) == 0 {
				return n, nil
			}
		}
	}
	// The queue holds at most limit bytes, or one write larger than it.
	for q.size > 0 && q.size+len(p) > q.limit && q.err == nil && !q.closed {
		q.cond.Wait()
	}
	if q.err != nil {
		return 0, q.err
	}
	q.size += len(p)
	for len(p) > 0 {
		if len(q.queue) == 0 || len(*q.queue[len(q.queue)-1]) == chunkSize {
			q.queue = append(q.queue, chunks.Get().(*[]byte))
		}
		last := q.queue[len(q.queue)-1]
		k := min(len(p), chunkSize-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	if !q.running {
		q.running = true
		go q.run()
	}
	q.cond.Broadcast()
	return n, nil
}

// run writes the queue out until the queue is closed and empty, or a
// write fails (the client stopped reading for the timeout, or left): then
// it closes the connection, which ends its reads too.
func (q *replyQueue) run() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for len(q.queue) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.queue) == 0 {
			q.running = false
			q.cond.Broadcast()
			return
		}
		b := q.queue[0]
		q.queue[0] = nil
		q.queue = q.queue[1:]
		q.busy = true
		q.mu.Unlock()
		err := q.conn.SetWriteDeadline(time.Now().Add(q.timeout))
		if err == nil {
			_, err = q.conn.Write(*b)
		}
		q.mu.Lock()
		q.busy = false
		q.size -= len(*b)
		*b = (*b)[:0]
		chunks.Put(b)
		if err != nil {
			q.err = err
			for _, b := range q.queue {
				*b = (*b)[:0]
				chunks.Put(b)
			}
			q.queue, q.size = nil, 0
			q.running = false
			q.cond.Broadcast()
			q.mu.Unlock()
			_ = q.conn.Close()
			q.mu.Lock()
			return
		}
		q.cond.Broadcast()
	}
}

// close lets the queued replies go out, waiting at most wait (none when
// the server shuts down), and closes the connection.
func (q *replyQueue) close(wait time.Duration) error {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	if q.running && wait > 0 {
		// The goroutine ends when the queue is written or a write fails,
		// each within the timeout; a timer bounds the wait anyway.
		t := time.AfterFunc(wait, func() {
			q.mu.Lock()
			if q.err == nil {
				q.err = errors.New("resp: replies not written before close")
			}
			q.cond.Broadcast()
			q.mu.Unlock()
		})
		for q.running && q.err == nil {
			q.cond.Wait()
		}
		t.Stop()
	}
	q.mu.Unlock()
	return q.conn.Close()
}
