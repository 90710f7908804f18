package resp

import (
	"errors"
	"strconv"
	"strings"

	"github.com/streamdedup/dedup"
)

// cmdBFAdd serves BF.ADD name item: 1 when new, 0 when seen.
func (s *Server) cmdBFAdd(c *conn, t *table, args [][]byte) {
	if isNew, ok := s.markOne(c, t, args[2]); ok {
		c.WriteBool(isNew)
	}
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
		}
		if !optionValue(c, args, i, opt, insertUsage, "CAPACITY", "ERROR", "EXPANSION") {
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

// bfReserveUsage is the syntax of BF.RESERVE, for its errors.
const bfReserveUsage = "BF.RESERVE name error_rate capacity [EXPANSION n] [NONSCALING]"

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
		opt := strings.ToUpper(string(args[i]))
		if opt == "NONSCALING" {
			continue
		}
		if !optionValue(c, args, i, opt, bfReserveUsage, "EXPANSION") {
			return
		}
		i++
		if err := checkExpansion(args[i]); err != nil {
			writeErr(c, err)
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
