package resp

import (
	"errors"
	"net"
	"sync"
	"time"
)

// replyQueue lets a connection's replies wait for its client without
// stopping the server from reading the client's commands. redcon writes
// the replies of each read before the next read, with a blocking write:
// a client that sends a whole pipeline before reading any reply (go-redis,
// redis-py) then blocks writing once the server stops reading, and both
// wait until a timeout. Writes try the socket at once (writeNow, without
// blocking); what does not fit is queued for a goroutine that writes it
// as the client reads, up to Config.MaxReplyBuffer bytes, past which
// writes block: the server stops reading that connection until its client
// reads, as before, but only past a bound that pipelines do not reach.
type replyQueue struct {
	conn    net.Conn
	limit   int
	timeout time.Duration // for each write of the queue

	mu      sync.Mutex
	cond    sync.Cond
	buf     []byte // queued bytes, in order after any being written
	spare   []byte
	busy    bool  // the goroutine is writing bytes taken from buf
	running bool  // the goroutine is started
	closed  bool  // no more writes: the goroutine ends when buf is empty
	err     error // the first write error: the connection is broken
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
	if len(q.buf) == 0 && !q.busy {
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
	for len(q.buf) > 0 && len(q.buf)+len(p) > q.limit && q.err == nil && !q.closed {
		q.cond.Wait()
	}
	if q.err != nil {
		return 0, q.err
	}
	q.buf = append(q.buf, p...)
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
		for len(q.buf) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.buf) == 0 {
			q.running = false
			q.cond.Broadcast()
			return
		}
		out := q.buf
		q.buf, q.busy = q.spare[:0], true
		q.mu.Unlock()
		err := q.conn.SetWriteDeadline(time.Now().Add(q.timeout))
		if err == nil {
			_, err = q.conn.Write(out)
		}
		q.mu.Lock()
		q.busy = false
		if cap(out) <= 1<<20 {
			q.spare = out[:0]
		} else {
			// A big pipeline's buffer is not kept for the connection's life.
			q.spare = nil
		}
		if err != nil {
			q.err, q.buf = err, nil
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
