package resp

import (
	"fmt"
	"time"

	"github.com/streamdedup/dedup"
)

// keysOf returns the key positions cmd gives args (COMMAND's first key,
// last key and step).
func keysOf(cmd *command, n int) (first, last, step int) {
	first, last, step = cmd.firstKey, cmd.lastKey, cmd.keyStep
	if last < 0 {
		last = n + last
	}
	return first, min(last, n-1), max(step, 1)
}

// commandSlot returns the slot of a command's keys, -1 when it has none,
// or -2 when they hash to different slots.
func commandSlot(cmd *command, args [][]byte) int {
	if cmd.firstKey == 0 {
		return -1
	}
	first, last, step := keysOf(cmd, len(args))
	slot := -1
	for i := first; i <= last; i += step {
		k := KeySlot(args[i])
		if slot >= 0 && k != slot {
			return -2
		}
		slot = k
	}
	return slot
}

// route checks that this node serves a command's keys. It returns the
// table the plain commands use (the key's range table) and a release to
// call once the command ran; handled when it answered the command itself
// (a redirection, CROSSSLOT, or a plain command of a range on the move).
func (cl *cluster) route(c *conn, cmd *command, args [][]byte) (kt *table, release func(), handled bool) {
	asking := c.asking
	if cmd.name != "asking" {
		c.asking = false
	}
	slot := commandSlot(cmd, args)
	if slot == -2 {
		c.WriteError(errCrossSlot)
		return nil, nil, true
	}
	if slot < 0 || !cl.hasMap {
		return nil, nil, false
	}
	plain := cmd.table == noTable // SET, SETNX, EXISTS: the range table's keys
	if !plain && string(args[1]) == DefaultTable {
		c.WriteError("ERR the default table is spread over the cluster's nodes by key slot: " +
			"use SET NX, SETNX and EXISTS for it, or a named table")
		return nil, nil, true
	}
	cl.mu.RLock()
	rg := cl.ranges[cl.m.Ranges[cl.m.find(slot)].Start]
	owner := cl.m.owner(slot)
	cl.mu.RUnlock()
	if rg == nil {
		c.WriteError(fmt.Sprintf("MOVED %d %s", slot, owner))
		return nil, nil, true
	}
	rg.mu.RLock()
	switch rg.state {
	case rangeOwned:
		return rg.t, rg.mu.RUnlock, false
	case rangeMigrating:
		defer rg.mu.RUnlock()
		if !plain {
			c.WriteError(errTryAgain)
			return nil, nil, true
		}
		cl.s.migratingPlain(c, rg, cmd, args, slot)
		return nil, nil, true
	case rangeImporting:
		defer rg.mu.RUnlock()
		if !asking {
			c.WriteError(fmt.Sprintf("MOVED %d %s", slot, rg.peer))
			return nil, nil, true
		}
		if !plain || cmd.name == "exists" {
			c.WriteError(errTryAgain)
			return nil, nil, true
		}
		cl.s.importingPlain(c, rg, args)
		return nil, nil, true
	default: // rangeGone
		rg.mu.RUnlock()
		cl.mu.RLock()
		owner = cl.m.owner(slot)
		cl.mu.RUnlock()
		c.WriteError(fmt.Sprintf("MOVED %d %s", slot, owner))
		return nil, nil, true
	}
}

// migratingPlain serves SET NX, SETNX and EXISTS of a range this node
// moves away: a key the range's engine holds is answered seen here; any
// other key is -ASK the target, which holds every key first seen since the
// move began. No key is marked here: the engine stays as it was copied.
// rg.mu is held shared.
func (s *Server) migratingPlain(c *conn, rg *slotRange, cmd *command, args [][]byte, slot int) {
	first, last, step := keysOf(cmd, len(args))
	var keys [][]byte
	for i := first; i <= last; i += step {
		keys = append(keys, args[i])
	}
	if cmd.name == "set" && !s.setArgsOK(c, args) {
		return
	}
	out := make([]bool, len(keys))
	if err := rg.t.probe(keys, out); err != nil {
		writeErr(c, err)
		return
	}
	for _, seen := range out {
		if !seen {
			if cmd.name == "exists" && len(keys) > 1 {
				// Some keys may be here and some there: the client
				// retries once the move is over.
				c.WriteError(errTryAgain)
				return
			}
			c.WriteError(fmt.Sprintf("ASK %d %s", slot, rg.peer))
			return
		}
	}
	switch cmd.name {
	case "set":
		c.WriteNull()
	case "setnx":
		c.WriteInt(0)
	default:
		c.WriteInt(len(keys))
	}
}

// importingPlain serves SET NX and SETNX after ASKING for a range moving
// to this node: the source sent the key here because its engine does not
// hold it, so the import table answers it, and records it when New to
// replay it into the range's engine once the copy has arrived. rg.mu is
// held shared.
func (s *Server) importingPlain(c *conn, rg *slotRange, args [][]byte) {
	setCmd := len(args[0]) == 3
	if setCmd && !s.setArgsOK(c, args) {
		return
	}
	seen := []bool{false}
	if err := rg.fresh.probe(args[1:2], seen); err != nil {
		writeErr(c, err)
		return
	}
	v := dedup.Duplicate
	if !seen[0] {
		// Log the key before it is marked, so that whatever the import
		// table holds, the log holds, and is replayed after a crash.
		rg.freshMu.Lock()
		full := rg.logged >= maxFreshKeys
		var err error
		if !full {
			// Synced before the reply under always, at most a second
			// behind under everysec.
			sync := s.cfg.Fsync == FsyncAlways || s.cfg.Fsync == FsyncEverySec && time.Since(rg.logSynced) >= time.Second
			err = appendImportLog(rg.log, args[1], sync)
			rg.logged++
			if sync && err == nil {
				rg.logSynced = time.Now()
			}
		}
		rg.freshMu.Unlock()
		if full {
			c.WriteError(errTryAgain)
			return
		}
		if err == nil {
			v, err = rg.fresh.observeOne(args[1])
		}
		if err != nil {
			writeErr(c, err)
			return
		}
	}
	if v == dedup.New {
		s.marked(c, rg.fresh)
	}
	switch {
	case setCmd && v == dedup.New:
		c.WriteString("OK")
	case setCmd:
		c.WriteNull()
	default:
		c.WriteInt(int(b2i(v == dedup.New)))
	}
}

// cmdAsking serves ASKING: the next command may be served for a slot this
// node imports.
func (s *Server) cmdAsking(c *conn, _ *table, _ [][]byte) {
	c.asking = true
	c.WriteString("OK")
}

// cmdReadWrite serves READONLY and READWRITE: a node has no replicas, so
// both change nothing.
func (s *Server) cmdReadWrite(c *conn, _ *table, _ [][]byte) { c.WriteString("OK") }
