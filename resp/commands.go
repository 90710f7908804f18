package resp

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
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

// optionValue checks args[i], the option opt (upper-cased) of a command
// whose syntax is usage: it must be one of valued, the options that take a
// value, and a value must follow it. Otherwise it answers the error that
// says which (the unknown option, or the missing value, with usage) and
// returns false.
func optionValue(c *conn, args [][]byte, i int, opt, usage string, valued ...string) bool {
	if !slices.Contains(valued, opt) {
		c.WriteError("ERR unknown option " + quote(args[i]) + ": " + usage)
		return false
	}
	if i+1 == len(args) {
		c.WriteError("ERR " + opt + " needs a value: " + usage)
		return false
	}
	return true
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
	c.WriteBulkString(s.redisMode())
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
	if !s.setArgsOK(c, args) {
		return
	}
	isNew, ok := s.markOne(c, s.keyTable(t), args[1])
	switch {
	case isNew:
		c.WriteString("OK")
	case ok:
		c.WriteNull()
	}
}

// keyTable is the table of a plain command's key: t, the key's slot
// range table on a cluster node, or the default table.
func (s *Server) keyTable(t *table) *table {
	if t != nil {
		return t
	}
	return s.def
}

// setArgsOK checks the options of SET key value NX [EX s|PX ms], or
// answers the error and returns false.
func (s *Server) setArgsOK(c *conn, args [][]byte) bool {
	nx, ttlSet := false, false
	for i := 3; i < len(args); i++ {
		opt := strings.ToUpper(string(args[i]))
		switch opt {
		case "NX":
			nx = true
		case "EX", "PX":
			if ttlSet || i+1 == len(args) {
				c.WriteError("ERR syntax error")
				return false
			}
			i++
			if err := s.checkTTL(opt, args[i]); err != nil {
				c.WriteError(err.Error())
				return false
			}
			ttlSet = true
		default:
			c.WriteError("ERR " + setUsage + ": " + opt + " is not supported")
			return false
		}
	}
	if !nx {
		c.WriteError("ERR " + setUsage + ": without NX a SET would overwrite, and a remembered key cannot be overwritten")
		return false
	}
	return true
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
	isNew, ok := s.markOne(c, s.keyTable(t), args[1])
	switch {
	case isNew:
		c.WriteInt(1)
	case ok:
		c.WriteInt(0)
	}
}

// cmdExists serves EXISTS key [key ...]: how many were seen within the
// window, without marking any.
func (s *Server) cmdExists(c *conn, t *table, args [][]byte) {
	out := make([]bool, len(args)-1)
	if err := s.keyTable(t).probe(args[1:], out); err != nil {
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
