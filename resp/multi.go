package resp

import (
	"fmt"

	"github.com/tidwall/redcon"
)

// commandArity is the argument count of every command the server knows,
// the name included, as Redis counts it: n exactly, or at least -n when
// negative. MULTI checks what it queues against it, so that a transaction
// with an unknown or malformed command runs none of them (EXECABORT), as
// in Redis.
var commandArity = map[string]int{
	"set": -3, "setnx": 3, "exists": -2, "dbsize": 1,
	"bf.add": 3, "bf.madd": -3, "bf.exists": 3, "bf.mexists": -3, "bf.reserve": -4, "bf.info": -2,
	"dedup.observe": -3, "dedup.forget": -3, "dedup.done": -3, "dedup.reserve": -2, "dedup.commit": -2,
	"dedup.checkpoint": 2, "dedup.stats": 2,
	"ping": -1, "echo": 2, "auth": -2, "hello": -1, "select": 2, "client": -2, "command": -1,
	"config": -2, "info": -1, "memory": -2, "quit": -1,
	"multi": 1, "exec": 1, "discard": 1, "watch": -2, "unwatch": 1,
}

// tx is a connection's transaction between MULTI and EXEC.
type tx struct {
	queue   [][][]byte // the commands queued, copied out of redcon's buffer
	bytes   int        // their argument bytes
	aborted bool       // a command could not be queued: EXEC runs none
}

// queueCommand queues a command of a connection in MULTI, answering
// QUEUED, or an error that aborts the transaction.
func (s *Server) queueCommand(conn redcon.Conn, cl *client, name string, args [][]byte) {
	arity, known := commandArity[name]
	switch {
	case !known:
		s.unknownCommand(conn, args)
		cl.tx.aborted = true
		return
	case arity > 0 && len(args) != arity, arity < 0 && len(args) < -arity:
		conn.WriteError(errArgs(name))
		cl.tx.aborted = true
		return
	}
	n := 0
	for _, a := range args {
		n += len(a)
	}
	if cl.tx.bytes+n > s.cfg.MaxCommandSize {
		// A transaction is bounded like one command: the server holds it
		// all until EXEC.
		conn.WriteError(fmt.Sprintf("ERR transaction of more than %d bytes exceeds max-command-size %d", cl.tx.bytes+n, s.cfg.MaxCommandSize))
		cl.tx.aborted, cl.tx.queue = true, nil
		return
	}
	if cl.tx.aborted {
		// Redis answers QUEUED after an error too; nothing will run.
		conn.WriteString("QUEUED")
		return
	}
	buf := make([]byte, 0, n)
	cp := make([][]byte, len(args))
	for i, a := range args {
		buf = append(buf, a...)
		cp[i] = buf[len(buf)-len(a):]
	}
	cl.tx.queue = append(cl.tx.queue, cp)
	cl.tx.bytes += n
	conn.WriteString("QUEUED")
}

// cmdMulti serves MULTI, EXEC, DISCARD, WATCH and UNWATCH. EXEC runs the
// queued commands in order and answers their replies as one array. They
// are not isolated from other connections' commands (dedup has no lock
// over a set of keys), but each one's verdict is atomic as always, and the
// replies under FsyncAlways still wait for their keys' commit.
func (s *Server) cmdMulti(conn redcon.Conn, cl *client, name string, args [][]byte) {
	if len(args) != 1 && name != "watch" {
		conn.WriteError(errArgs(name))
		return
	}
	switch name {
	case "multi":
		if cl.tx != nil {
			conn.WriteError("ERR MULTI calls can not be nested")
			return
		}
		cl.tx = &tx{}
		conn.WriteString("OK")
	case "discard":
		if cl.tx == nil {
			conn.WriteError("ERR DISCARD without MULTI")
			return
		}
		cl.tx = nil
		conn.WriteString("OK")
	case "exec":
		t := cl.tx
		if t == nil {
			conn.WriteError("ERR EXEC without MULTI")
			return
		}
		cl.tx = nil
		if t.aborted {
			conn.WriteError("EXECABORT Transaction discarded because of previous errors.")
			return
		}
		conn.WriteArray(len(t.queue))
		for _, a := range t.queue {
			s.dispatch(conn, cl, redcon.Command{Args: a})
		}
	case "watch":
		if cl.tx != nil {
			conn.WriteError("ERR WATCH inside MULTI is not allowed")
			return
		}
		if len(args) < 2 {
			conn.WriteError(errArgs(name))
			return
		}
		// A key that is not remembered yet can become so at any time, and
		// the server tracks no writes per key: EXEC could not honour it.
		conn.WriteError("ERR dedup does not support WATCH: a SET NX in the transaction answers whether the key was new")
	case "unwatch":
		conn.WriteString("OK")
	}
}
