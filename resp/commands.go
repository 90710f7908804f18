package resp

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/streamdedup/dedup"
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
func writeErr(c *conn, err error) {
	msg := strings.TrimPrefix(err.Error(), "resp: ")
	msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
	c.WriteError("ERR " + msg)
}

// unknownCommand answers a command the server does not know, as Redis.
func (s *Server) unknownCommand(c *conn, args [][]byte) {
	var b strings.Builder
	for i, a := range args[1:] {
		if i == 3 {
			break
		}
		b.WriteString(quote(a) + " ")
	}
	c.WriteError(fmt.Sprintf("ERR unknown command %s, with args beginning with: %s", quote(args[0]), b.String()))
}

// wrongPass is Redis's answer to a wrong password or user.
const wrongPass = "WRONGPASS invalid username-password pair or user is disabled."

// cmdAuth serves AUTH [default] password.
func (s *Server) cmdAuth(c *conn, _ *table, args [][]byte) {
	var user []byte
	switch len(args) {
	case 2:
	case 3:
		user = args[1]
	default:
		c.WriteError(errArgs("auth"))
		return
	}
	if s.cfg.RequirePass == "" {
		c.WriteError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return
	}
	if !s.passOK(user, args[len(args)-1]) {
		c.WriteError(wrongPass)
		return
	}
	c.authed = true
	c.WriteString("OK")
}

// passOK checks a user (nil or "default", the only one) and password
// against RequirePass, in constant time over the hashes, so that the
// comparison does not leak the length either.
func (s *Server) passOK(user, pass []byte) bool {
	if user != nil && string(user) != "default" {
		return false
	}
	got := sha256.Sum256(pass)
	want := sha256.Sum256([]byte(s.cfg.RequirePass))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// helloUsage is the syntax of HELLO, for its errors.
const helloUsage = "HELLO [protover [AUTH username password] [SETNAME clientname]]"

// cmdHello serves HELLO [protover [AUTH username password] [SETNAME
// clientname]]: it authenticates and names the connection when asked,
// switches it to RESP protover (2 or 3), and answers the server's
// description as a map in that protocol.
func (s *Server) cmdHello(c *conn, _ *table, args [][]byte) {
	resp3 := c.resp3
	if len(args) >= 2 {
		v, err := strconv.Atoi(string(args[1]))
		if err != nil {
			c.WriteError("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			c.WriteError("NOPROTO unsupported protocol version")
			return
		}
		resp3 = v == 3
	}
	var user, pass, name []byte
	for i := 2; i < len(args); i++ {
		switch opt := strings.ToUpper(string(args[i])); {
		case opt == "AUTH" && i+2 < len(args):
			user, pass = args[i+1], args[i+2]
			i += 2
		case opt == "SETNAME" && i+1 < len(args):
			name = args[i+1]
			i++
		default:
			c.WriteError("ERR syntax error in HELLO option " + quote(args[i]) + ": " + helloUsage)
			return
		}
	}
	if pass != nil {
		if s.cfg.RequirePass == "" {
			c.WriteError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
			return
		}
		if !s.passOK(user, pass) {
			c.WriteError(wrongPass)
			return
		}
		c.authed = true
	}
	if !c.authed {
		c.WriteError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if name != nil {
		c.name = string(name)
	}
	c.resp3 = resp3
	proto := 2
	if resp3 {
		proto = 3
	}
	c.WriteMap(7)
	c.WriteBulkString("server")
	c.WriteBulkString("dedup")
	c.WriteBulkString("version")
	c.WriteBulkString(redisVersion)
	c.WriteBulkString("proto")
	c.WriteInt(proto)
	c.WriteBulkString("id")
	c.WriteInt64(c.id)
	c.WriteBulkString("mode")
	c.WriteBulkString("standalone")
	c.WriteBulkString("role")
	c.WriteBulkString("master")
	c.WriteBulkString("modules")
	c.WriteArray(0)
}

func (s *Server) cmdClient(c *conn, t *table, args [][]byte) {
	switch strings.ToLower(string(args[1])) {
	case "setname":
		if len(args) != 3 {
			c.WriteError(errArgs("client|setname"))
			return
		}
		c.name = string(args[2])
		c.WriteString("OK")
	case "getname":
		if c.name == "" {
			c.WriteNull()
		} else {
			c.WriteBulkString(c.name)
		}
	case "setinfo":
		c.WriteString("OK")
	case "id":
		c.WriteInt64(c.id)
	default:
		c.WriteError("ERR unknown subcommand " + quote(args[1]) + " of CLIENT: dedup supports SETNAME, GETNAME, SETINFO, ID")
	}
}

// configParams are the parameters CONFIG GET answers, with their values
// on this server.
func (s *Server) configParams() [][2]string {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	return [][2]string{
		{"appendfsync", s.cfg.Fsync},
		{"appendonly", yes(s.cfg.Fsync != FsyncNo)},
		{"databases", "1"},
		{"maxclients", strconv.Itoa(s.cfg.MaxClients)},
		{"proto-max-bulk-len", strconv.Itoa(s.cfg.MaxArgSize)},
		{"protected-mode", yes(s.cfg.RequirePass == "" && !s.cfg.Unprotected)},
		{"save", ""},
		{"timeout", "0"},
	}
}

// cmdConfig serves CONFIG GET pattern [pattern ...]: the parameters whose
// names match a glob pattern (case-insensitive, as Redis matches), each
// once, as a map. RequirePass is never shown.
func (s *Server) cmdConfig(c *conn, _ *table, args [][]byte) {
	if len(args) < 3 || !strings.EqualFold(string(args[1]), "get") {
		c.WriteError("ERR dedup supports CONFIG GET only")
		return
	}
	var kv [][2]string
	for _, p := range s.configParams() {
		for _, pat := range args[2:] {
			if ok, _ := path.Match(strings.ToLower(string(pat)), p[0]); ok {
				kv = append(kv, p)
				break
			}
		}
	}
	c.WriteMap(len(kv))
	for _, p := range kv {
		c.WriteBulkString(p[0])
		c.WriteBulkString(p[1])
	}
}

// setUsage is the answer to the SET forms dedup does not serve.
const setUsage = "dedup serves SET key value NX [EX seconds|PX milliseconds] only"

// cmdSet serves SET key value NX [EX s|PX ms]: +OK for a new key, nil for
// one seen within the window (committed or in flight).
func (s *Server) cmdSet(c *conn, t *table, args [][]byte) {
	nx, ttlSet := false, false
	for i := 3; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch opt {
		case "NX":
			nx = true
		case "EX", "PX":
			if ttlSet || i+1 == len(args) {
				c.WriteError("ERR syntax error")
				return
			}
			i++
			if err := s.checkTTL(opt, args[i]); err != nil {
				c.WriteError(err.Error())
				return
			}
			ttlSet = true
		default:
			c.WriteError("ERR " + setUsage + ": " + opt + " is not supported")
			return
		}
	}
	if !nx {
		c.WriteError("ERR " + setUsage + ": without NX a SET would overwrite, and a remembered key cannot be overwritten")
		return
	}
	v, err := s.def.observeOne(args[1])
	if err != nil {
		writeErr(c, err)
		return
	}
	if v == dedup.New {
		s.marked(c, s.def)
		c.WriteString("OK")
		return
	}
	c.WriteNull()
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
func (s *Server) cmdSetNX(c *conn, t *table, args [][]byte) {
	v, err := s.def.observeOne(args[1])
	if err != nil {
		writeErr(c, err)
		return
	}
	if v == dedup.New {
		s.marked(c, s.def)
		c.WriteInt(1)
		return
	}
	c.WriteInt(0)
}

// cmdExists serves EXISTS key [key ...]: how many were seen within the
// window, without marking any.
func (s *Server) cmdExists(c *conn, t *table, args [][]byte) {
	out := make([]bool, len(args)-1)
	if err := s.def.probe(args[1:], out); err != nil {
		writeErr(c, err)
		return
	}
	n := 0
	for _, ok := range out {
		if ok {
			n++
		}
	}
	c.WriteInt(n)
}

// cmdBFAdd serves BF.ADD name item: 1 when new, 0 when seen.
func (s *Server) cmdBFAdd(c *conn, t *table, args [][]byte) {
	v, err := t.observeOne(args[2])
	if err != nil {
		writeErr(c, err)
		return
	}
	if v == dedup.New {
		s.marked(c, t)
	}
	c.WriteBool(v == dedup.New)
}

// cmdBFMAdd serves BF.MADD name item [item ...]: one 1 or 0 per item, in
// one engine batch.
func (s *Server) cmdBFMAdd(c *conn, t *table, args [][]byte) {
	s.addItems(c, t, args[2:])
}

// addItems observes keys in t and answers one 1 (true in RESP3) per new
// key and 0 per seen one: the reply of BF.MADD and BF.INSERT.
func (s *Server) addItems(c *conn, t *table, keys [][]byte) {
	out := make([]dedup.Verdict, len(keys))
	if err := t.observe(keys, out); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteArray(len(out))
	marked := false
	for _, v := range out {
		marked = marked || v == dedup.New
		c.WriteBool(v == dedup.New)
	}
	if marked {
		s.marked(c, t)
	}
}

// cmdBFInsert serves BF.INSERT name [CAPACITY n] [ERROR r] [EXPANSION n]
// [NOCREATE] [NONSCALING] ITEMS item [item ...]: BF.MADD that creates a
// missing table as BF.RESERVE would with CAPACITY and ERROR (the server's
// defaults for those not given), or, with NOCREATE, answers "not found".
// EXPANSION and NONSCALING are checked and accepted as in BF.RESERVE.
func (s *Server) cmdBFInsert(c *conn, _ *table, args [][]byte) {
	name := args[1]
	var capacity int64
	fp := 0.0
	nocreate := false
	i := 2
	for ; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		if opt == "ITEMS" {
			break
		}
		switch opt {
		case "NOCREATE":
			nocreate = true
			continue
		case "NONSCALING":
			continue
		case "CAPACITY", "ERROR", "EXPANSION":
		default:
			c.WriteError("ERR unknown option " + quote(args[i]) + ": " + insertUsage)
			return
		}
		if i+1 == len(args) {
			c.WriteError("ERR " + opt + " needs a value: " + insertUsage)
			return
		}
		i++
		switch opt {
		case "CAPACITY":
			n, err := strconv.ParseInt(string(args[i]), 10, 64)
			if err != nil || n <= 0 {
				c.WriteError("ERR (capacity should be larger than 0)")
				return
			}
			capacity = n
		case "ERROR":
			f, err := strconv.ParseFloat(string(args[i]), 64)
			if err != nil || !(f > 0 && f < 1) {
				c.WriteError("ERR (0 < error rate range < 1)")
				return
			}
			fp = f
		case "EXPANSION":
			if err := checkExpansion(args[i]); err != nil {
				writeErr(c, err)
				return
			}
		}
	}
	if i+1 >= len(args) {
		c.WriteError("ERR ITEMS and at least one item are required: " + insertUsage)
		return
	}
	if nocreate && (capacity > 0 || fp > 0) {
		c.WriteError("ERR NOCREATE cannot be used together with CAPACITY or ERROR")
		return
	}
	t, err := s.lookup(string(name), false)
	if err == nil && t == nil && !nocreate {
		opts := s.defaultTableOptions()
		if capacity > 0 || fp > 0 {
			if capacity == 0 {
				capacity = int64(opts.Capacity)
			}
			if fp == 0 {
				fp = opts.FalsePositiveRate
			}
			opts = s.bloomOptions(fp, capacity)
		}
		// A concurrent creator may win: its table is the one used.
		if rerr := s.reserve(string(name), opts); rerr != nil && !errors.Is(rerr, errExists) {
			err = rerr
		} else {
			t, err = s.lookup(string(name), false)
		}
	}
	if err != nil {
		writeErr(c, err)
		return
	}
	if t == nil {
		c.WriteError("ERR not found")
		return
	}
	s.addItems(c, t, args[i+1:])
}

// insertUsage is the syntax of BF.INSERT, for its errors.
const insertUsage = "BF.INSERT name [CAPACITY n] [ERROR r] [EXPANSION n] [NOCREATE] [NONSCALING] ITEMS item [item ...]"

// cmdBFCard serves BF.CARD name: the keys the table remembers (committed
// or in flight), as BF.INFO's "Number of items inserted"; 0 for a missing
// table.
func (s *Server) cmdBFCard(c *conn, t *table, _ [][]byte) {
	if t == nil {
		c.WriteInt(0)
		return
	}
	st, err := t.stats()
	if err != nil {
		writeErr(c, err)
		return
	}
	c.WriteInt64(int64(st.FilterKeys) + max(st.InFlightKeys, 0))
}

// checkExpansion checks BF.RESERVE's and BF.INSERT's EXPANSION value as
// RedisBloom does. A dedup table does not expand: it holds its capacity
// per window and its generations forget the oldest keys as the window
// passes, so the value is checked and otherwise has no effect.
func checkExpansion(arg []byte) error {
	n, err := strconv.ParseInt(string(arg), 10, 64)
	if err != nil || n < 1 || n > 32768 {
		return errors.New("EXPANSION must be in range [1, 32768]")
	}
	return nil
}

// cmdBFExists serves BF.EXISTS name item and BF.MEXISTS name item...:
// 1 for an item seen within the window, without marking it. A missing
// table holds nothing.
func (s *Server) cmdBFExists(c *conn, t *table, args [][]byte) {
	multi := len(args[0]) > 9 // BF.MEXISTS, not BF.EXISTS
	keys := args[2:]
	out := make([]bool, len(keys))
	if t != nil {
		if err := t.probe(keys, out); err != nil {
			writeErr(c, err)
			return
		}
	}
	if multi {
		c.WriteArray(len(out))
	}
	for _, ok := range out {
		c.WriteBool(ok)
	}
}

// cmdBFReserve serves BF.RESERVE name error_rate capacity [EXPANSION n]
// [NONSCALING]: a table with its own engine, sized for capacity keys per
// window at error_rate. EXPANSION and NONSCALING are checked and accepted:
// a dedup table neither expands nor fills, its generations forget the
// oldest keys as the window passes (see checkExpansion).
func (s *Server) cmdBFReserve(c *conn, _ *table, args [][]byte) {
	for i := 4; i < len(args); i++ {
		switch strings.ToUpper(string(args[i])) {
		case "NONSCALING":
		case "EXPANSION":
			if i+1 == len(args) {
				c.WriteError("ERR EXPANSION needs a value: BF.RESERVE name error_rate capacity [EXPANSION n] [NONSCALING]")
				return
			}
			i++
			if err := checkExpansion(args[i]); err != nil {
				writeErr(c, err)
				return
			}
		default:
			c.WriteError("ERR unknown option " + quote(args[i]) + ": BF.RESERVE name error_rate capacity [EXPANSION n] [NONSCALING]")
			return
		}
	}
	fp, err := strconv.ParseFloat(string(args[2]), 64)
	if err != nil || !(fp > 0 && fp < 1) {
		c.WriteError("ERR (0 < error rate range < 1)")
		return
	}
	capacity, err := strconv.ParseInt(string(args[3]), 10, 64)
	if err != nil || capacity <= 0 {
		c.WriteError("ERR (capacity should be larger than 0)")
		return
	}
	if err := s.reserve(string(args[1]), s.bloomOptions(fp, capacity)); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteString("OK")
}

// bloomOptions are the options of a table BF.RESERVE makes: capacity keys
// over the server's window at the false-positive target fp.
func (s *Server) bloomOptions(fp float64, capacity int64) TableOptions {
	w := s.cfg.Engine.Window
	return TableOptions{
		Window:            w,
		ExpectedRate:      float64(capacity) / w.Seconds(),
		FalsePositiveRate: fp,
		Probabilistic:     s.cfg.Engine.Probabilistic,
		Capacity:          uint64(capacity),
	}
}

// cmdBFInfo serves BF.INFO name [CAPACITY|SIZE|FILTERS|ITEMS|EXPANSION].
func (s *Server) cmdBFInfo(c *conn, t *table, args [][]byte) {
	if t == nil {
		c.WriteError("ERR not found")
		return
	}
	st, err := t.stats()
	if err != nil {
		writeErr(c, err)
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
				c.WriteArray(1)
				c.WriteInt64(f.v)
				return
			}
		}
		c.WriteError("ERR Invalid information value")
		return
	}
	c.WriteMap(len(fields))
	for _, f := range fields {
		c.WriteString(f.name)
		c.WriteInt64(f.v)
	}
}

// cmdObserve serves DEDUP.OBSERVE table key [key ...]: the engine's
// verdict per key, as a status reply: new, duplicate or in-flight. The
// keys answered new stay in flight until the table commits them
// (DEDUP.COMMIT, or the server's background commits) or DEDUP.FORGET
// releases them; DEDUP.OBSERVE itself never waits for a commit.
func (s *Server) cmdObserve(c *conn, t *table, args [][]byte) {
	keys := args[2:]
	out := make([]dedup.Verdict, len(keys))
	if err := t.observe(keys, out); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteArray(len(out))
	for _, v := range out {
		c.WriteString(v.String())
	}
}

// cmdForget serves DEDUP.FORGET table key [key ...]: releases keys in
// flight (their processing failed) and answers how many were.
func (s *Server) cmdForget(c *conn, t *table, args [][]byte) {
	if t == nil {
		c.WriteInt(0)
		return
	}
	n, err := t.forget(args[2:])
	if err != nil {
		writeErr(c, err)
		return
	}
	c.WriteInt(n)
}

// cmdDone serves DEDUP.DONE table key [key ...] on a table reserved with
// EXPLICITDONE: marks keys observed New as processed, so that the next
// commit makes them durable, and answers how many were in flight and not
// Done yet. Under FsyncAlways the reply waits for that commit.
func (s *Server) cmdDone(c *conn, t *table, args [][]byte) {
	n, err := t.done(args[2:])
	if err != nil {
		writeErr(c, err)
		return
	}
	if n > 0 {
		s.needSync(c, t)
	}
	c.WriteInt(n)
}

// reserveUsage is the syntax of DEDUP.RESERVE, for its errors.
const reserveUsage = "DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r] [CAPACITY n] [EXPLICITDONE]"

// cmdReserve serves DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r]
// [CAPACITY n] [EXPLICITDONE]: BF.RESERVE with dedup's own options, each
// defaulting to the server's (--window, --fp, --rate over the window).
// EXPLICITDONE gives the table per-key completion: its keys observed New
// stay in flight until DEDUP.DONE (or DEDUP.FORGET).
func (s *Server) cmdReserve(c *conn, t *table, args [][]byte) {
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
			c.WriteError("ERR " + opt + " given twice: " + reserveUsage)
			return
		}
		seen[opt] = true
		if opt == "EXPLICITDONE" {
			opts.ExplicitDone = true
			continue
		}
		if opt != "WINDOW" && opt != "ERROR_RATE" && opt != "CAPACITY" {
			c.WriteError("ERR unknown option " + quote(args[i]) + ": " + reserveUsage)
			return
		}
		if i+1 == len(args) {
			c.WriteError("ERR " + opt + " needs a value: " + reserveUsage)
			return
		}
		i++
		v := string(args[i])
		switch opt {
		case "WINDOW":
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms <= 0 || ms > math.MaxInt64/int64(time.Millisecond) {
				c.WriteError("ERR WINDOW " + quote(args[i]) + " is not a positive number of milliseconds")
				return
			}
			opts.Window = time.Duration(ms) * time.Millisecond
		case "ERROR_RATE":
			fp, err := strconv.ParseFloat(v, 64)
			if err != nil || !(fp > 0 && fp < 1) {
				c.WriteError("ERR ERROR_RATE " + quote(args[i]) + " is not between 0 and 1 (exclusive)")
				return
			}
			opts.FalsePositiveRate = fp
		case "CAPACITY":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				c.WriteError("ERR CAPACITY " + quote(args[i]) + " is not a positive integer")
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
		writeErr(c, err)
		return
	}
	c.WriteString("OK")
}

// cmdCommit serves DEDUP.COMMIT table [checkpoint]: commits the table's
// keys in flight, with checkpoint, fsynced, then answers +OK.
func (s *Server) cmdCommit(c *conn, t *table, args [][]byte) {
	var cp []byte
	if len(args) == 3 {
		cp = args[2]
	}
	if err := t.commit(cp); err != nil {
		writeErr(c, err)
		return
	}
	c.WriteString("OK")
}

// cmdCheckpoint serves DEDUP.CHECKPOINT table: the last committed
// checkpoint, nil if none.
func (s *Server) cmdCheckpoint(c *conn, t *table, args [][]byte) {
	cp, err := t.checkpoint()
	if err != nil {
		writeErr(c, err)
		return
	}
	if cp == nil {
		c.WriteNull()
		return
	}
	c.WriteBulk(cp)
}

// cmdStats serves DEDUP.STATS table: the engine's stats as a flat array
// of names and values.
func (s *Server) cmdStats(c *conn, t *table, args [][]byte) {
	st, err := t.stats()
	if err != nil {
		writeErr(c, err)
		return
	}
	kv := statsFields(t.opts, st)
	c.WriteMap(len(kv))
	for _, f := range kv {
		c.WriteBulkString(f.name)
		switch v := f.v.(type) {
		case uint64:
			c.WriteUint64(v)
		case int64:
			c.WriteInt64(v)
		case float64:
			c.WriteDouble(v)
		default:
			c.WriteBulkString(fmt.Sprint(v))
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
	// Four significant digits: an estimate.
	fp, _ := strconv.ParseFloat(strconv.FormatFloat(st.EstimatedFPRate, 'g', 4, 64), 64)
	if math.IsNaN(fp) {
		fp = 0
	}
	return []field{
		{"mode", mode},
		{"window", o.Window.String()},
		{"capacity", o.Capacity},
		{"false_positive_rate", o.FalsePositiveRate},
		{"explicit_done", b2i(o.ExplicitDone)},
		{"observed", st.Observed},
		{"new", st.New},
		{"duplicate", st.Duplicate},
		{"inflight", st.InFlight},
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
