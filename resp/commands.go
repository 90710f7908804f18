package resp

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/tidwall/redcon"
)

// lower returns the ASCII lower case of b in buf's storage when it fits,
// so that the common command names cost no allocation.
func lower(buf []byte, b []byte) []byte {
	if len(b) > len(buf) {
		return []byte(strings.ToLower(string(b)))
	}
	out := buf[:len(b)]
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// errArgs is Redis's answer to a wrong number of arguments.
func errArgs(name string) string {
	return "ERR wrong number of arguments for '" + name + "' command"
}

// quote shows an argument in an error message as Redis does, 'arg',
// shortened, with the bytes that would break a RESP error line replaced.
func quote(b []byte) string {
	more := ""
	if len(b) > 64 {
		b, more = b[:64], "..."
	}
	q := []byte(string(b))
	for i, c := range q {
		if c < ' ' || c == 0x7f {
			q[i] = '?'
		}
	}
	return "'" + string(q) + more + "'"
}

// writeErr answers err, prefixing "ERR " unless it carries a Redis error
// code already.
func writeErr(conn redcon.Conn, err error) {
	msg := strings.TrimPrefix(err.Error(), "resp: ")
	msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
	conn.WriteError("ERR " + msg)
}

// dispatch serves one command.
func (s *Server) dispatch(conn redcon.Conn, cl *client, cmd redcon.Command) {
	var buf [32]byte
	args := cmd.Args
	name := lower(buf[:], args[0])
	if !cl.authed {
		switch string(name) {
		case "auth", "quit", "hello":
		default:
			conn.WriteError("NOAUTH Authentication required.")
			return
		}
	}
	if cl.tx != nil {
		switch string(name) {
		case "exec", "discard", "multi", "watch", "quit":
		default:
			s.queueCommand(conn, cl, string(name), args)
			return
		}
	}
	switch string(name) {
	case "multi", "exec", "discard", "watch", "unwatch":
		s.cmdMulti(conn, cl, string(name), args)
	case "set":
		s.cmdSet(conn, cl, args)
	case "setnx":
		s.cmdSetNX(conn, cl, args)
	case "exists":
		s.cmdExists(conn, args)
	case "bf.add":
		s.cmdBFAdd(conn, cl, args)
	case "bf.madd":
		s.cmdBFMAdd(conn, cl, args)
	case "bf.exists":
		s.cmdBFExists(conn, args, false)
	case "bf.mexists":
		s.cmdBFExists(conn, args, true)
	case "bf.reserve":
		s.cmdBFReserve(conn, args)
	case "bf.info":
		s.cmdBFInfo(conn, args)
	case "dedup.observe":
		s.cmdObserve(conn, args)
	case "dedup.forget":
		s.cmdForget(conn, args)
	case "dedup.done":
		s.cmdDone(conn, cl, args)
	case "dedup.reserve":
		s.cmdReserve(conn, args)
	case "dedup.commit":
		s.cmdCommit(conn, args)
	case "dedup.checkpoint":
		s.cmdCheckpoint(conn, args)
	case "dedup.stats":
		s.cmdStats(conn, args)
	case "ping":
		switch len(args) {
		case 1:
			conn.WriteString("PONG")
		case 2:
			conn.WriteBulk(args[1])
		default:
			conn.WriteError(errArgs("ping"))
		}
	case "echo":
		if len(args) != 2 {
			conn.WriteError(errArgs("echo"))
			return
		}
		conn.WriteBulk(args[1])
	case "auth":
		s.cmdAuth(conn, cl, args)
	case "hello":
		// RESP2 only: clients (go-redis, redis-py, lettuce) take this
		// Redis 5 answer as "fall back to RESP2".
		conn.WriteError("ERR unknown command 'HELLO': this server speaks RESP2 only")
	case "select":
		if len(args) != 2 {
			conn.WriteError(errArgs("select"))
		} else if string(args[1]) != "0" {
			conn.WriteError("ERR DB index is out of range: dedup serves database 0 only (use BF.* or DEDUP.* tables)")
		} else {
			conn.WriteString("OK")
		}
	case "client":
		s.cmdClient(conn, cl, args)
	case "command":
		if len(args) >= 2 && strings.EqualFold(string(args[1]), "count") {
			conn.WriteInt(0)
		} else {
			conn.WriteArray(0)
		}
	case "config":
		s.cmdConfig(conn, args)
	case "info":
		s.cmdInfo(conn, args)
	case "memory":
		// MEMORY PURGE, as Redis's asks jemalloc to return freed pages:
		// a full collection, then the freed heap goes back to the system,
		// so that used_memory shows what the remembered keys hold.
		if len(args) != 2 || !strings.EqualFold(string(args[1]), "purge") {
			conn.WriteError("ERR dedup supports MEMORY PURGE only")
			return
		}
		debug.FreeOSMemory()
		conn.WriteString("OK")
	case "dbsize":
		st, err := s.def.stats()
		if err != nil {
			writeErr(conn, err)
			return
		}
		conn.WriteUint64(st.FilterKeys + uint64(max(st.InFlightKeys, 0)))
	case "quit":
		s.endBatch(conn, cl)
		conn.WriteString("OK")
		cl.closed = true
		conn.Close()
	default:
		s.unknownCommand(conn, args)
	}
}

// unknownCommand answers a command the server does not know, as Redis.
func (s *Server) unknownCommand(conn redcon.Conn, args [][]byte) {
	var b strings.Builder
	for i, a := range args[1:] {
		if i == 3 {
			break
		}
		b.WriteString(quote(a) + " ")
	}
	conn.WriteError(fmt.Sprintf("ERR unknown command %s, with args beginning with: %s", quote(args[0]), b.String()))
}

// cmdAuth checks the password in constant time (over the hashes, so the
// comparison does not leak the length either).
func (s *Server) cmdAuth(conn redcon.Conn, cl *client, args [][]byte) {
	var pass []byte
	switch len(args) {
	case 2:
		pass = args[1]
	case 3:
		if string(args[1]) != "default" {
			conn.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
			return
		}
		pass = args[2]
	default:
		conn.WriteError(errArgs("auth"))
		return
	}
	if s.cfg.RequirePass == "" {
		conn.WriteError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	got := sha256.Sum256(pass)
	want := sha256.Sum256([]byte(s.cfg.RequirePass))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		conn.WriteError("WRONGPASS invalid username-password pair or user is disabled.")
		return
	}
	cl.authed = true
	conn.WriteString("OK")
}

func (s *Server) cmdClient(conn redcon.Conn, cl *client, args [][]byte) {
	if len(args) < 2 {
		conn.WriteError(errArgs("client"))
		return
	}
	switch strings.ToLower(string(args[1])) {
	case "setname":
		if len(args) != 3 {
			conn.WriteError(errArgs("client|setname"))
			return
		}
		cl.name = string(args[2])
		conn.WriteString("OK")
	case "getname":
		if cl.name == "" {
			conn.WriteNull()
		} else {
			conn.WriteBulkString(cl.name)
		}
	case "setinfo":
		conn.WriteString("OK")
	case "id":
		conn.WriteInt64(cl.id)
	default:
		conn.WriteError("ERR unknown subcommand " + quote(args[1]) + " of CLIENT: dedup supports SETNAME, GETNAME, SETINFO, ID")
	}
}

// cmdConfig answers CONFIG GET for the few parameters tools ask about
// (redis-benchmark reads save and appendonly) and nothing for the rest.
func (s *Server) cmdConfig(conn redcon.Conn, args [][]byte) {
	if len(args) < 3 || !strings.EqualFold(string(args[1]), "get") {
		conn.WriteError("ERR dedup supports CONFIG GET only")
		return
	}
	var kv []string
	for _, p := range args[2:] {
		switch strings.ToLower(string(p)) {
		case "save":
			kv = append(kv, "save", "")
		case "appendonly":
			v := "yes"
			if s.cfg.Fsync == FsyncNo {
				v = "no"
			}
			kv = append(kv, "appendonly", v)
		case "appendfsync":
			kv = append(kv, "appendfsync", s.cfg.Fsync)
		case "databases":
			kv = append(kv, "databases", "1")
		case "maxclients":
			kv = append(kv, "maxclients", strconv.Itoa(s.cfg.MaxClients))
		}
	}
	conn.WriteArray(len(kv))
	for _, v := range kv {
		conn.WriteBulkString(v)
	}
}

// setUsage is the answer to the SET forms dedup does not serve.
const setUsage = "dedup serves SET key value NX [EX seconds|PX milliseconds] only"

// cmdSet serves SET key value NX [EX s|PX ms]: +OK for a new key, nil for
// one seen within the window (committed or in flight).
func (s *Server) cmdSet(conn redcon.Conn, cl *client, args [][]byte) {
	if len(args) < 3 {
		conn.WriteError(errArgs("set"))
		return
	}
	nx, ttlSet := false, false
	for i := 3; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch opt {
		case "NX":
			nx = true
		case "EX", "PX":
			if ttlSet || i+1 == len(args) {
				conn.WriteError("ERR syntax error")
				return
			}
			i++
			if err := s.checkTTL(opt, args[i]); err != nil {
				conn.WriteError(err.Error())
				return
			}
			ttlSet = true
		default:
			conn.WriteError("ERR " + setUsage + ": " + opt + " is not supported")
			return
		}
	}
	if !nx {
		conn.WriteError("ERR " + setUsage + ": without NX a SET would overwrite, and a remembered key cannot be overwritten")
		return
	}
	v, err := s.def.observeOne(args[1])
	if err != nil {
		writeErr(conn, err)
		return
	}
	if v == dedup.New {
		s.marked(cl, s.def)
		conn.WriteString("OK")
		return
	}
	conn.WriteNull()
}

// checkTTL accepts an EX or PX no longer than the window: a key is
// remembered for the whole window, so any shorter expiry holds as "at
// least".
func (s *Server) checkTTL(opt string, arg []byte) error {
	n, err := strconv.ParseInt(string(arg), 10, 64)
	if err != nil || n <= 0 {
		return errors.New("ERR invalid expire time in 'set' command")
	}
	unit := time.Second
	if opt == "PX" {
		unit = time.Millisecond
	}
	w := s.def.opts.Window
	if n > int64(w/unit) {
		return fmt.Errorf("ERR %s %d is longer than the dedup window %v: this server remembers a key for its window (--window), at least as long as any shorter EX", opt, n, w)
	}
	return nil
}

// cmdSetNX serves SETNX key value: 1 for a new key, 0 for a seen one.
func (s *Server) cmdSetNX(conn redcon.Conn, cl *client, args [][]byte) {
	if len(args) != 3 {
		conn.WriteError(errArgs("setnx"))
		return
	}
	v, err := s.def.observeOne(args[1])
	if err != nil {
		writeErr(conn, err)
		return
	}
	if v == dedup.New {
		s.marked(cl, s.def)
		conn.WriteInt(1)
		return
	}
	conn.WriteInt(0)
}

// cmdExists serves EXISTS key [key ...]: how many were seen within the
// window, without marking any.
func (s *Server) cmdExists(conn redcon.Conn, args [][]byte) {
	if len(args) < 2 {
		conn.WriteError(errArgs("exists"))
		return
	}
	out := make([]bool, len(args)-1)
	if err := s.def.probe(args[1:], out); err != nil {
		writeErr(conn, err)
		return
	}
	n := 0
	for _, ok := range out {
		if ok {
			n++
		}
	}
	conn.WriteInt(n)
}

// table returns the table named by arg for a command, answering the
// error itself when there is none.
func (s *Server) table(conn redcon.Conn, arg []byte, create bool) (*table, bool) {
	t, err := s.lookup(string(arg), create)
	if err != nil {
		writeErr(conn, err)
		return nil, false
	}
	return t, true
}

// existing returns the table named by arg for a DEDUP.* command that
// reads or commits a table (DEDUP.DONE, COMMIT, CHECKPOINT, STATS): unlike
// BF.ADD it creates none, and answers a missing one an error.
func (s *Server) existing(conn redcon.Conn, arg []byte) (*table, bool) {
	t, ok := s.table(conn, arg, false)
	if ok && t == nil {
		conn.WriteError("ERR not found: no table " + quote(arg) +
			" (BF.RESERVE or DEDUP.RESERVE creates one, and so does a first BF.ADD or DEDUP.OBSERVE)")
		return nil, false
	}
	return t, ok
}

// cmdBFAdd serves BF.ADD name item: 1 when new, 0 when seen.
func (s *Server) cmdBFAdd(conn redcon.Conn, cl *client, args [][]byte) {
	if len(args) != 3 {
		conn.WriteError(errArgs("bf.add"))
		return
	}
	t, ok := s.table(conn, args[1], true)
	if !ok {
		return
	}
	v, err := t.observeOne(args[2])
	if err != nil {
		writeErr(conn, err)
		return
	}
	if v == dedup.New {
		s.marked(cl, t)
		conn.WriteInt(1)
		return
	}
	conn.WriteInt(0)
}

// cmdBFMAdd serves BF.MADD name item [item ...]: one 1 or 0 per item, in
// one engine batch.
func (s *Server) cmdBFMAdd(conn redcon.Conn, cl *client, args [][]byte) {
	if len(args) < 3 {
		conn.WriteError(errArgs("bf.madd"))
		return
	}
	t, ok := s.table(conn, args[1], true)
	if !ok {
		return
	}
	keys := args[2:]
	out := make([]dedup.Verdict, len(keys))
	if err := t.observe(keys, out); err != nil {
		writeErr(conn, err)
		return
	}
	conn.WriteArray(len(out))
	marked := false
	for _, v := range out {
		if v == dedup.New {
			marked = true
			conn.WriteInt(1)
		} else {
			conn.WriteInt(0)
		}
	}
	if marked {
		s.marked(cl, t)
	}
}

// cmdBFExists serves BF.EXISTS name item and BF.MEXISTS name item...:
// 1 for an item seen within the window, without marking it. A missing
// table holds nothing.
func (s *Server) cmdBFExists(conn redcon.Conn, args [][]byte, multi bool) {
	if !multi && len(args) != 3 || multi && len(args) < 3 {
		conn.WriteError(errArgs(strings.ToLower(string(args[0]))))
		return
	}
	t, ok := s.table(conn, args[1], false)
	if !ok {
		return
	}
	keys := args[2:]
	out := make([]bool, len(keys))
	if t != nil {
		if err := t.probe(keys, out); err != nil {
			writeErr(conn, err)
			return
		}
	}
	if multi {
		conn.WriteArray(len(out))
	}
	for _, ok := range out {
		if ok {
			conn.WriteInt(1)
		} else {
			conn.WriteInt(0)
		}
	}
}

// cmdBFReserve serves BF.RESERVE name error_rate capacity: a table with
// its own engine, sized for capacity keys per window at error_rate.
func (s *Server) cmdBFReserve(conn redcon.Conn, args [][]byte) {
	if len(args) < 4 {
		conn.WriteError(errArgs("bf.reserve"))
		return
	}
	if len(args) > 4 {
		conn.WriteError("ERR dedup tables grow on their own (generations chain new filters): " +
			strings.ToUpper(string(args[4])) + " is not supported")
		return
	}
	fp, err := strconv.ParseFloat(string(args[2]), 64)
	if err != nil || !(fp > 0 && fp < 1) {
		conn.WriteError("ERR (0 < error rate range < 1)")
		return
	}
	capacity, err := strconv.ParseInt(string(args[3]), 10, 64)
	if err != nil || capacity <= 0 {
		conn.WriteError("ERR (capacity should be larger than 0)")
		return
	}
	w := s.cfg.Engine.Window
	opts := TableOptions{
		Window:            w,
		ExpectedRate:      float64(capacity) / w.Seconds(),
		FalsePositiveRate: fp,
		Probabilistic:     s.cfg.Engine.Probabilistic,
		Capacity:          uint64(capacity),
	}
	if err := s.reserve(string(args[1]), opts); err != nil {
		writeErr(conn, err)
		return
	}
	conn.WriteString("OK")
}

// cmdBFInfo serves BF.INFO name [CAPACITY|SIZE|FILTERS|ITEMS|EXPANSION].
func (s *Server) cmdBFInfo(conn redcon.Conn, args [][]byte) {
	if len(args) != 2 && len(args) != 3 {
		conn.WriteError(errArgs("bf.info"))
		return
	}
	t, ok := s.table(conn, args[1], false)
	if !ok {
		return
	}
	if t == nil {
		conn.WriteError("ERR not found")
		return
	}
	st, err := t.stats()
	if err != nil {
		writeErr(conn, err)
		return
	}
	fields := []struct {
		name, key string
		v         int64
	}{
		{"Capacity", "capacity", int64(t.opts.Capacity)},
		// The filters are made as keys come: until they hold more than
		// the table plans for its capacity, report the plan, as
		// RedisBloom reports the filter it reserved.
		{"Size", "size", int64(max(st.FilterBytes, t.plannedBytes))},
		{"Number of filters", "filters", int64(max(st.Generations, t.plannedFilters))},
		{"Number of items inserted", "items", int64(st.FilterKeys) + st.InFlightKeys},
		// Generations chain a new filter of the same size when one fills.
		{"Expansion rate", "expansion", 1},
	}
	if len(args) == 3 {
		want := strings.ToLower(string(args[2]))
		for _, f := range fields {
			if f.key == want {
				conn.WriteArray(1)
				conn.WriteInt64(f.v)
				return
			}
		}
		conn.WriteError("ERR Invalid information value")
		return
	}
	conn.WriteArray(2 * len(fields))
	for _, f := range fields {
		conn.WriteString(f.name)
		conn.WriteInt64(f.v)
	}
}

// cmdObserve serves DEDUP.OBSERVE table key [key ...]: the engine's
// verdict per key, as a status reply: new, duplicate or in-flight. The
// keys answered new stay in flight until the table commits them
// (DEDUP.COMMIT, or the server's background commits) or DEDUP.FORGET
// releases them; DEDUP.OBSERVE itself never waits for a commit.
func (s *Server) cmdObserve(conn redcon.Conn, args [][]byte) {
	if len(args) < 3 {
		conn.WriteError(errArgs("dedup.observe"))
		return
	}
	t, ok := s.table(conn, args[1], true)
	if !ok {
		return
	}
	keys := args[2:]
	out := make([]dedup.Verdict, len(keys))
	if err := t.observe(keys, out); err != nil {
		writeErr(conn, err)
		return
	}
	conn.WriteArray(len(out))
	for _, v := range out {
		conn.WriteString(v.String())
	}
}

// cmdForget serves DEDUP.FORGET table key [key ...]: releases keys in
// flight (their processing failed) and answers how many were.
func (s *Server) cmdForget(conn redcon.Conn, args [][]byte) {
	if len(args) < 3 {
		conn.WriteError(errArgs("dedup.forget"))
		return
	}
	t, ok := s.table(conn, args[1], false)
	if !ok {
		return
	}
	if t == nil {
		conn.WriteInt(0)
		return
	}
	n, err := t.forget(args[2:])
	if err != nil {
		writeErr(conn, err)
		return
	}
	conn.WriteInt(n)
}

// cmdDone serves DEDUP.DONE table key [key ...] on a table reserved with
// EXPLICITDONE: marks keys observed New as processed, so that the next
// commit makes them durable, and answers how many were in flight and not
// Done yet. Under FsyncAlways the reply waits for that commit.
func (s *Server) cmdDone(conn redcon.Conn, cl *client, args [][]byte) {
	if len(args) < 3 {
		conn.WriteError(errArgs("dedup.done"))
		return
	}
	t, ok := s.existing(conn, args[1])
	if !ok {
		return
	}
	n, err := t.done(args[2:])
	if err != nil {
		writeErr(conn, err)
		return
	}
	if n > 0 {
		s.needSync(cl, t)
	}
	conn.WriteInt(n)
}

// reserveUsage is the syntax of DEDUP.RESERVE, for its errors.
const reserveUsage = "DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r] [CAPACITY n] [EXPLICITDONE]"

// cmdReserve serves DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r]
// [CAPACITY n] [EXPLICITDONE]: BF.RESERVE with dedup's own options, each
// defaulting to the server's (--window, --fp, --rate over the window).
// EXPLICITDONE gives the table per-key completion: its keys observed New
// stay in flight until DEDUP.DONE (or DEDUP.FORGET).
func (s *Server) cmdReserve(conn redcon.Conn, args [][]byte) {
	if len(args) < 2 {
		conn.WriteError(errArgs("dedup.reserve"))
		return
	}
	e := s.cfg.Engine
	opts := TableOptions{
		Window:            e.Window,
		FalsePositiveRate: e.FalsePositiveRate,
		Probabilistic:     e.Probabilistic,
	}
	var capacity int64
	seen := map[string]bool{}
	for i := 2; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		if seen[opt] {
			conn.WriteError("ERR " + opt + " given twice: " + reserveUsage)
			return
		}
		seen[opt] = true
		if opt == "EXPLICITDONE" {
			opts.ExplicitDone = true
			continue
		}
		if opt != "WINDOW" && opt != "ERROR_RATE" && opt != "CAPACITY" {
			conn.WriteError("ERR unknown option " + quote(args[i]) + ": " + reserveUsage)
			return
		}
		if i+1 == len(args) {
			conn.WriteError("ERR " + opt + " needs a value: " + reserveUsage)
			return
		}
		i++
		v := string(args[i])
		switch opt {
		case "WINDOW":
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
				conn.WriteError("ERR WINDOW " + quote(args[i]) + " is not a positive number of milliseconds")
				return
			}
			opts.Window = time.Duration(ms) * time.Millisecond
		case "ERROR_RATE":
			fp, err := strconv.ParseFloat(v, 64)
			if err != nil || !(fp > 0 && fp < 1) {
				conn.WriteError("ERR ERROR_RATE " + quote(args[i]) + " is not between 0 and 1 (exclusive)")
				return
			}
			opts.FalsePositiveRate = fp
		case "CAPACITY":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				conn.WriteError("ERR CAPACITY " + quote(args[i]) + " is not a positive integer")
				return
			}
			capacity = n
		}
	}
	// Sized like BF.RESERVE: CAPACITY keys over the window; without it,
	// the server's rate over this table's window.
	if capacity > 0 {
		opts.ExpectedRate = float64(capacity) / opts.Window.Seconds()
		opts.Capacity = uint64(capacity)
	} else {
		opts.ExpectedRate = e.ExpectedRate
		opts.Capacity = uint64(e.ExpectedRate * opts.Window.Seconds())
	}
	if err := s.reserve(string(args[1]), opts); err != nil {
		writeErr(conn, err)
		return
	}
	conn.WriteString("OK")
}

// cmdCommit serves DEDUP.COMMIT table [checkpoint]: commits the table's
// keys in flight, with checkpoint, fsynced, then answers +OK.
func (s *Server) cmdCommit(conn redcon.Conn, args [][]byte) {
	if len(args) != 2 && len(args) != 3 {
		conn.WriteError(errArgs("dedup.commit"))
		return
	}
	t, ok := s.existing(conn, args[1])
	if !ok {
		return
	}
	var cp []byte
	if len(args) == 3 {
		cp = args[2]
	}
	if err := t.commit(cp); err != nil {
		writeErr(conn, err)
		return
	}
	conn.WriteString("OK")
}

// cmdCheckpoint serves DEDUP.CHECKPOINT table: the last committed
// checkpoint, nil if none.
func (s *Server) cmdCheckpoint(conn redcon.Conn, args [][]byte) {
	if len(args) != 2 {
		conn.WriteError(errArgs("dedup.checkpoint"))
		return
	}
	t, ok := s.existing(conn, args[1])
	if !ok {
		return
	}
	cp, err := t.checkpoint()
	if err != nil {
		writeErr(conn, err)
		return
	}
	if cp == nil {
		conn.WriteNull()
		return
	}
	conn.WriteBulk(cp)
}

// cmdStats serves DEDUP.STATS table: the engine's stats as a flat array
// of names and values.
func (s *Server) cmdStats(conn redcon.Conn, args [][]byte) {
	if len(args) != 2 {
		conn.WriteError(errArgs("dedup.stats"))
		return
	}
	t, ok := s.existing(conn, args[1])
	if !ok {
		return
	}
	st, err := t.stats()
	if err != nil {
		writeErr(conn, err)
		return
	}
	kv := statsFields(t.opts, st)
	conn.WriteArray(2 * len(kv))
	for _, f := range kv {
		conn.WriteBulkString(f.name)
		switch v := f.v.(type) {
		case uint64:
			conn.WriteUint64(v)
		case int64:
			conn.WriteInt64(v)
		default:
			conn.WriteBulkString(fmt.Sprint(v))
		}
	}
}

type field struct {
	name string
	v    any
}

// statsFields lists a table's options and stats for DEDUP.STATS and INFO.
func statsFields(o TableOptions, st dedup.Stats) []field {
	mode := "exact"
	if o.Probabilistic {
		mode = "probabilistic"
	}
	fp := strconv.FormatFloat(st.EstimatedFPRate, 'g', 4, 64)
	if math.IsNaN(st.EstimatedFPRate) {
		fp = "0"
	}
	return []field{
		{"mode", mode},
		{"window", o.Window.String()},
		{"capacity", o.Capacity},
		{"false_positive_rate", strconv.FormatFloat(o.FalsePositiveRate, 'g', -1, 64)},
		{"explicit_done", b2i(o.ExplicitDone)},
		{"observed", st.Observed},
		{"new", st.New},
		{"duplicate", st.Duplicate},
		{"inflight", st.InFlightVerdicts},
		{"inflight_keys", st.InFlightKeys},
		{"keys", st.FilterKeys},
		{"filter_bytes", st.FilterBytes},
		{"generations", int64(st.Generations)},
		{"estimated_fp_rate", fp},
		{"store_lookups", st.StoreLookups},
		{"false_positives", st.FalsePositives},
		{"commits", st.Commits},
		{"commit_errors", st.CommitErrors},
		{"committed_keys", st.CommittedKeys},
		{"commit_latency_mean_us", st.CommitLatencyMean.Microseconds()},
		{"commit_latency_max_us", st.CommitLatencyMax.Microseconds()},
		{"snapshots", st.Snapshots},
		{"disk_bytes", st.DiskBytes},
		{"restored_from", st.RestoredFrom},
		{"restored_keys", st.RestoredKeys},
	}
}

// b2i is 1 for true, as Redis answers flags.
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
