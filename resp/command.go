package resp

import (
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
)

// The command table. Every command the server serves is one entry: its
// name, its arity as Redis counts it, the table it works on and its
// handler. dispatch checks the arity and looks the table up before the
// handler runs, MULTI checks what it queues against the same entries, and
// COMMAND answers from them. Adding a command is adding an entry (from any
// file of the package, with register in an init function) and its
// handler.

// tableUse says which table a command works on; its first argument (after
// the name) names the table.
type tableUse uint8

const (
	// noTable: the command names no table (the plain Redis commands work
	// on the default one).
	noTable tableUse = iota
	// tableCreate: a missing table is created with the server's defaults,
	// as RedisBloom's BF.ADD creates a filter.
	tableCreate
	// tableIfExists: a missing table is passed as nil; the handler
	// answers for it (BF.EXISTS of a missing filter is 0).
	tableIfExists
	// tableExisting: a missing table is answered "-ERR not found" and
	// none is created.
	tableExisting
)

// cmdFlags describe a command to dispatch and to COMMAND.
type cmdFlags uint16

const (
	// flagWrite: the command marks keys or creates tables.
	flagWrite cmdFlags = 1 << iota
	// flagReadonly: the command changes nothing.
	flagReadonly
	// flagFast: the command's cost does not grow with its arguments.
	flagFast
	// flagNoAuth: the command is served before AUTH.
	flagNoAuth
	// flagTxControl: inside MULTI the command is served at once, not
	// queued.
	flagTxControl
)

// flagNames are the names COMMAND gives the flags, as Redis names them.
var flagNames = []struct {
	f    cmdFlags
	name string
}{
	{flagWrite, "write"}, {flagReadonly, "readonly"}, {flagFast, "fast"},
	{flagNoAuth, "no_auth"}, {flagTxControl, "no_multi"},
}

// command is one entry of the command table.
type command struct {
	// name is the command's name in lower case.
	name string
	// arity counts the arguments, the name included, as Redis does: n
	// exactly, or at least -n when negative.
	arity int
	// table is the table the command works on, named by args[1].
	table tableUse
	flags cmdFlags
	// firstKey, lastKey and keyStep are the key positions COMMAND
	// reports (lastKey -1: the last argument); 0 when the command takes
	// no key.
	firstKey, lastKey, keyStep int
	// run serves the command once its arity is checked; t is its table
	// (nil for noTable, and for a missing one under tableIfExists).
	run func(s *Server, c *conn, t *table, args [][]byte)
}

// arityOK reports whether n arguments, the name included, fit c.arity.
func (c *command) arityOK(n int) bool {
	if c.arity >= 0 {
		return n == c.arity
	}
	return n >= -c.arity
}

// commands is the command table, by lower-case name.
var commands = map[string]*command{}

// register adds entries to the command table; a name registered twice
// panics at init.
func register(cmds ...command) {
	for _, c := range cmds {
		if c.name != strings.ToLower(c.name) || c.run == nil || c.arity == 0 {
			panic(fmt.Sprintf("resp: malformed command table entry %q", c.name))
		}
		if commands[c.name] != nil {
			panic(fmt.Sprintf("resp: command %q registered twice", c.name))
		}
		commands[c.name] = &c
	}
}

func init() {
	register(
		// The Redis dedup idiom, on the default table.
		command{name: "set", arity: -3, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdSet},
		command{name: "setnx", arity: 3, flags: flagWrite | flagFast, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdSetNX},
		command{name: "exists", arity: -2, flags: flagReadonly | flagFast, firstKey: 1, lastKey: -1, keyStep: 1, run: (*Server).cmdExists},
		command{name: "dbsize", arity: 1, flags: flagReadonly | flagFast, run: (*Server).cmdDBSize},

		// RedisBloom's names over tables.
		command{name: "bf.reserve", arity: -4, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdBFReserve},
		command{name: "bf.add", arity: 3, table: tableCreate, flags: flagWrite | flagFast, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdBFAdd},
		command{name: "bf.madd", arity: -3, table: tableCreate, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdBFMAdd},
		command{name: "bf.insert", arity: -4, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdBFInsert},
		command{name: "bf.exists", arity: 3, table: tableIfExists, flags: flagReadonly | flagFast, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdBFExists},
		command{name: "bf.mexists", arity: -3, table: tableIfExists, flags: flagReadonly, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdBFExists},
		command{name: "bf.info", arity: -2, table: tableIfExists, flags: flagReadonly | flagFast, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdBFInfo},
		command{name: "bf.card", arity: 2, table: tableIfExists, flags: flagReadonly | flagFast, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdBFCard},

		// What Redis cannot say.
		command{name: "dedup.reserve", arity: -2, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdReserve},
		command{name: "dedup.observe", arity: -3, table: tableCreate, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdObserve},
		command{name: "dedup.forget", arity: -3, table: tableIfExists, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdForget},
		command{name: "dedup.done", arity: -3, table: tableExisting, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdDone},
		command{name: "dedup.commit", arity: -2, table: tableExisting, flags: flagWrite, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdCommit},
		command{name: "dedup.checkpoint", arity: 2, table: tableExisting, flags: flagReadonly | flagFast, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdCheckpoint},
		command{name: "dedup.stats", arity: 2, table: tableExisting, flags: flagReadonly, firstKey: 1, lastKey: 1, keyStep: 1, run: (*Server).cmdStats},

		// Connection and server commands.
		command{name: "ping", arity: -1, flags: flagFast, run: (*Server).cmdPing},
		command{name: "echo", arity: 2, flags: flagFast, run: (*Server).cmdEcho},
		command{name: "auth", arity: -2, flags: flagNoAuth | flagFast, run: (*Server).cmdAuth},
		command{name: "hello", arity: -1, flags: flagNoAuth | flagFast, run: (*Server).cmdHello},
		command{name: "select", arity: 2, flags: flagFast, run: (*Server).cmdSelect},
		command{name: "client", arity: -2, run: (*Server).cmdClient},
		command{name: "command", arity: -1, run: (*Server).cmdCommand},
		command{name: "config", arity: -2, run: (*Server).cmdConfig},
		command{name: "info", arity: -1, run: (*Server).cmdInfo},
		command{name: "memory", arity: -2, run: (*Server).cmdMemory},
		command{name: "quit", arity: -1, flags: flagNoAuth | flagTxControl | flagFast, run: (*Server).cmdQuit},

		// Transactions.
		command{name: "multi", arity: 1, flags: flagTxControl | flagFast, run: (*Server).cmdMulti},
		command{name: "exec", arity: 1, flags: flagTxControl, run: (*Server).cmdExec},
		command{name: "discard", arity: 1, flags: flagTxControl | flagFast, run: (*Server).cmdDiscard},
		command{name: "watch", arity: -2, flags: flagTxControl | flagFast, run: (*Server).cmdWatch},
		command{name: "unwatch", arity: 1, flags: flagFast, run: (*Server).cmdUnwatch},
	)
}

// dispatch serves one command.
func (s *Server) dispatch(c *conn, args [][]byte) {
	var buf [32]byte
	cmd := commands[string(lower(buf[:], args[0]))]
	if !c.authed && (cmd == nil || cmd.flags&flagNoAuth == 0) {
		c.WriteError("NOAUTH Authentication required.")
		return
	}
	if c.tx != nil && (cmd == nil || cmd.flags&flagTxControl == 0) {
		s.queueCommand(c, cmd, args)
		return
	}
	if cmd == nil {
		s.unknownCommand(c, args)
		return
	}
	if !cmd.arityOK(len(args)) {
		c.WriteError(errArgs(cmd.name))
		return
	}
	var t *table
	if s.cluster != nil {
		kt, release, handled := s.cluster.route(c, cmd, args)
		if handled {
			return
		}
		if release != nil {
			defer release()
		}
		t = kt // the range table of a plain command's key
	}
	if cmd.table != noTable {
		var err error
		t, err = s.lookup(string(args[1]), cmd.table == tableCreate)
		if err != nil {
			writeErr(c, err)
			return
		}
		if t == nil && cmd.table == tableExisting {
			c.WriteError("ERR not found: no table " + quote(args[1]) +
				" (BF.RESERVE or DEDUP.RESERVE creates one, and so does a first BF.ADD, DEDUP.OBSERVE or DEDUP.BEGIN)")
			return
		}
	}
	cmd.run(s, c, t, args)
}

// sortedCommands returns the command table sorted by name.
func sortedCommands() []*command {
	out := make([]*command, 0, len(commands))
	for _, c := range commands {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *command) int { return strings.Compare(a.name, b.name) })
	return out
}

// cmdCommand serves COMMAND [COUNT | LIST | INFO name... | DOCS]: the
// command table, as Redis 7 describes its commands. DOCS answers no
// documentation (an empty map).
func (s *Server) cmdCommand(c *conn, _ *table, args [][]byte) {
	if len(args) == 1 {
		cmds := sortedCommands()
		c.WriteArray(len(cmds))
		for _, cmd := range cmds {
			writeCommandInfo(c, cmd)
		}
		return
	}
	switch sub := strings.ToLower(string(args[1])); sub {
	case "count":
		c.WriteInt(len(commands))
	case "list":
		cmds := sortedCommands()
		c.WriteArray(len(cmds))
		for _, cmd := range cmds {
			c.WriteBulkString(cmd.name)
		}
	case "info":
		c.WriteArray(len(args) - 2)
		var buf [32]byte
		for _, a := range args[2:] {
			if cmd := commands[string(lower(buf[:], a))]; cmd != nil {
				writeCommandInfo(c, cmd)
			} else {
				c.WriteNullArray()
			}
		}
	case "docs":
		c.WriteMap(0)
	default:
		c.WriteError("ERR unknown subcommand " + quote(args[1]) + " of COMMAND: dedup supports COUNT, LIST, INFO, DOCS")
	}
}

// writeCommandInfo writes one command's description as Redis 7's COMMAND
// does: name, arity, flags, first key, last key, key step, ACL categories,
// tips, key specs, subcommands (the last four empty).
func writeCommandInfo(c *conn, cmd *command) {
	c.WriteArray(10)
	c.WriteBulkString(cmd.name)
	c.WriteInt(cmd.arity)
	n := 0
	for _, f := range flagNames {
		if cmd.flags&f.f != 0 {
			n++
		}
	}
	c.WriteSet(n)
	for _, f := range flagNames {
		if cmd.flags&f.f != 0 {
			c.WriteString(f.name)
		}
	}
	c.WriteInt(cmd.firstKey)
	c.WriteInt(cmd.lastKey)
	c.WriteInt(cmd.keyStep)
	c.WriteSet(0)
	c.WriteArray(0)
	writeKeySpecs(c, cmd)
	c.WriteArray(0)
}

// writeKeySpecs writes a command's key specs as Redis 7 does: one spec,
// its first key found at an index and the rest as a range, for a command
// with keys; none for the others. Cluster clients route by them (and by
// the first and last key before them).
func writeKeySpecs(c *conn, cmd *command) {
	if cmd.firstKey == 0 {
		c.WriteArray(0)
		return
	}
	c.WriteArray(1)
	c.WriteMap(3)
	c.WriteBulkString("flags")
	c.WriteSet(2)
	if cmd.flags&flagWrite != 0 {
		c.WriteString("RW")
		c.WriteString("UPDATE")
	} else {
		c.WriteString("RO")
		c.WriteString("ACCESS")
	}
	c.WriteBulkString("begin_search")
	c.WriteMap(2)
	c.WriteBulkString("type")
	c.WriteBulkString("index")
	c.WriteBulkString("spec")
	c.WriteMap(1)
	c.WriteBulkString("index")
	c.WriteInt(cmd.firstKey)
	c.WriteBulkString("find_keys")
	c.WriteMap(2)
	c.WriteBulkString("type")
	c.WriteBulkString("range")
	c.WriteBulkString("spec")
	c.WriteMap(3)
	c.WriteBulkString("lastkey")
	last := -1 // up to the last argument
	if cmd.lastKey >= 0 {
		last = cmd.lastKey - cmd.firstKey
	}
	c.WriteInt(last)
	c.WriteBulkString("keystep")
	c.WriteInt(max(cmd.keyStep, 1))
	c.WriteBulkString("limit")
	c.WriteInt(0)
}

func (s *Server) cmdPing(c *conn, _ *table, args [][]byte) {
	switch len(args) {
	case 1:
		c.WriteString("PONG")
	case 2:
		c.WriteBulk(args[1])
	default:
		c.WriteError(errArgs("ping"))
	}
}

func (s *Server) cmdEcho(c *conn, _ *table, args [][]byte) { c.WriteBulk(args[1]) }

func (s *Server) cmdSelect(c *conn, _ *table, args [][]byte) {
	if string(args[1]) != "0" {
		c.WriteError("ERR DB index is out of range: dedup serves database 0 only (use BF.* or DEDUP.* tables)")
		return
	}
	c.WriteString("OK")
}

// cmdMemory serves MEMORY PURGE, as Redis's asks jemalloc to return freed
// pages: a full collection, then the freed heap goes back to the system,
// so that used_memory shows what the remembered keys hold.
func (s *Server) cmdMemory(c *conn, _ *table, args [][]byte) {
	if len(args) != 2 || !strings.EqualFold(string(args[1]), "purge") {
		c.WriteError("ERR dedup supports MEMORY PURGE only")
		return
	}
	debug.FreeOSMemory()
	c.WriteString("OK")
}

// cmdDBSize serves DBSIZE: the keys the default table remembers.
func (s *Server) cmdDBSize(c *conn, _ *table, _ [][]byte) {
	tables := []*table{s.def}
	if s.sharded() {
		tables = s.clusterTables() // the key slots this node serves
	}
	var n uint64
	for _, t := range tables {
		st, err := t.stats()
		if err != nil {
			writeErr(c, err)
			return
		}
		n += st.FilterKeys + uint64(max(st.InFlightKeys, 0))
	}
	c.WriteUint64(n)
}

// cmdQuit answers OK once the replies before it are written, and closes
// the connection.
func (s *Server) cmdQuit(c *conn, _ *table, _ [][]byte) {
	c.WriteString("OK")
	_ = c.flush()
	c.closed = true
}
