package resp

import (
	"fmt"
)

// tx is a connection's transaction between MULTI and EXEC.
type tx struct {
	queue   [][][]byte // the commands queued, copied out of the read buffer
	bytes   int        // their argument bytes
	aborted bool       // a command could not be queued: EXEC runs none
}

// queueCommand queues a command of a connection in MULTI, answering
// QUEUED, or an error that aborts the transaction: an unknown command or a
// wrong number of arguments is refused when queued, against the command
// table, so that EXEC runs none of a malformed transaction (EXECABORT), as
// in Redis.
func (s *Server) queueCommand(c *conn, cmd *command, args [][]byte) {
	switch {
	case cmd == nil:
		s.unknownCommand(c, args)
		c.tx.aborted = true
		return
	case !cmd.arityOK(len(args)):
		c.WriteError(errArgs(cmd.name))
		c.tx.aborted = true
		return
	}
	n := 0
	for _, a := range args {
		n += len(a)
	}
	if c.tx.bytes+n > s.cfg.MaxCommandSize {
		// A transaction is bounded like one command: the server holds it
		// all until EXEC.
		c.WriteError(fmt.Sprintf("ERR transaction of more than %d bytes exceeds max-command-size %d", c.tx.bytes+n, s.cfg.MaxCommandSize))
		c.tx.aborted, c.tx.queue = true, nil
		return
	}
	if c.tx.aborted {
		// Redis answers QUEUED after an error too; nothing will run.
		c.WriteString("QUEUED")
		return
	}
	buf := make([]byte, 0, n)
	cp := make([][]byte, len(args))
	for i, a := range args {
		buf = append(buf, a...)
		cp[i] = buf[len(buf)-len(a):]
	}
	c.tx.queue = append(c.tx.queue, cp)
	c.tx.bytes += n
	c.WriteString("QUEUED")
}

func (s *Server) cmdMulti(c *conn, _ *table, _ [][]byte) {
	if c.tx != nil {
		c.WriteError("ERR MULTI calls can not be nested")
		return
	}
	c.tx = &tx{}
	c.WriteString("OK")
}

func (s *Server) cmdDiscard(c *conn, _ *table, _ [][]byte) {
	if c.tx == nil {
		c.WriteError("ERR DISCARD without MULTI")
		return
	}
	c.tx = nil
	c.WriteString("OK")
}

// cmdExec runs the queued commands in order and answers their replies as
// one array. They are not isolated from other connections' commands
// (dedup has no lock over a set of keys), but each one's verdict is atomic
// as always, and the replies under FsyncAlways still wait for their keys'
// commit.
func (s *Server) cmdExec(c *conn, _ *table, _ [][]byte) {
	t := c.tx
	if t == nil {
		c.WriteError("ERR EXEC without MULTI")
		return
	}
	c.tx = nil
	if t.aborted {
		c.WriteError("EXECABORT Transaction discarded because of previous errors.")
		return
	}
	c.WriteArray(len(t.queue))
	for _, a := range t.queue {
		s.dispatch(c, a)
	}
}

// cmdWatch refuses WATCH: a key that is not remembered yet can become so
// at any time, and the server tracks no writes per key, so EXEC could not
// honour it.
func (s *Server) cmdWatch(c *conn, _ *table, _ [][]byte) {
	if c.tx != nil {
		c.WriteError("ERR WATCH inside MULTI is not allowed")
		return
	}
	c.WriteError("ERR dedup does not support WATCH: a SET NX in the transaction answers whether the key was new")
}

func (s *Server) cmdUnwatch(c *conn, _ *table, _ [][]byte) { c.WriteString("OK") }
