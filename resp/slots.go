package resp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Slots is the number of hash slots of a Redis Cluster: a key belongs to
// slot [KeySlot](key), and every slot to one node.
const Slots = 16384

// crc16tab is the table of CRC16-CCITT (XMODEM: polynomial 0x1021,
// initial value 0, no reflection), the checksum Redis Cluster hashes keys
// with.
var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crc16 is CRC16-XMODEM of b: crc16("123456789") is 0x31C3.
func crc16(b []byte) uint16 {
	var c uint16
	for _, x := range b {
		c = c<<8 ^ crc16tab[byte(c>>8)^x]
	}
	return c
}

// KeySlot is the hash slot of key as Redis Cluster computes it: CRC16 of
// the key modulo 16384, or, when the key holds a hash tag (a '{' followed
// later by a '}' with at least one byte between them), of the bytes
// between the first '{' and the first '}' after it only. So "{user1}:a"
// and "{user1}:b" share a slot, while "{}x" and "x{}" hash whole.
func KeySlot(key []byte) int {
	if i := slices.Index(key, '{'); i >= 0 {
		if j := slices.Index(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) & (Slots - 1))
}

// SlotRange is a range of slots, Start to End inclusive, and the node
// that owns it.
type SlotRange struct {
	Start, End int
	// Node is the owner's address, HOST:PORT, as clients reach it.
	Node string
}

// SlotMap is a cluster's static map: which node owns each slot range, and
// the nodes that own none yet (a node a range can move to). Every slot is
// owned by exactly one range.
type SlotMap struct {
	// Ranges are sorted by Start and cover 0..16383 without overlap.
	Ranges []SlotRange
	// Nodes are every node's address, those of Ranges first, in the
	// order they first appear.
	Nodes []string
	// Epoch orders maps: a node keeps the map of the highest epoch it saw
	// (one a move wrote beats the file it started with). Default 0.
	Epoch int64
}

// ReadSlotMap reads a slot map file; see [ParseSlotMap].
func ReadSlotMap(path string) (*SlotMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSlotMap, err)
	}
	defer f.Close()
	m, err := ParseSlotMap(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ParseSlotMap reads a slot map, one range a line:
//
//	# comment
//	epoch 3              optional: the map's epoch (default 0)
//	0-5460 127.0.0.1:7001
//	5461-10922 127.0.0.1:7002
//	10923 127.0.0.1:7002 a range of one slot
//	10924-16383 127.0.0.1:7003
//	node 127.0.0.1:7004  a node that owns no slot yet
//
// The ranges must cover every slot, 0 to 16383, each once. An error names
// the line and what is wrong with it.
func ParseSlotMap(r io.Reader) (*SlotMap, error) {
	m := &SlotMap{}
	sc := bufio.NewScanner(r)
	n := 0
	seen := map[string]bool{}
	addNode := func(a string) {
		if !seen[a] {
			seen[a] = true
			m.Nodes = append(m.Nodes, a)
		}
	}
	var spare []string
	epochSet := false
	for sc.Scan() {
		n++
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: line %d %q: %s", ErrBadSlotMap, n, strings.TrimSpace(line), fmt.Sprintf(format, args...))
		}
		if len(f) != 2 {
			return nil, bad("want START-END HOST:PORT, node HOST:PORT or epoch N")
		}
		switch f[0] {
		case "epoch":
			e, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || e < 0 {
				return nil, bad("epoch %q is not a non-negative integer", f[1])
			}
			if epochSet {
				return nil, bad("a second epoch line")
			}
			m.Epoch, epochSet = e, true
			continue
		case "node":
			if err := checkNodeAddr(f[1]); err != nil {
				return nil, bad("%v", err)
			}
			spare = append(spare, f[1])
			continue
		}
		lo, hi, isRange := strings.Cut(f[0], "-")
		if !isRange {
			hi = lo
		}
		start, err1 := strconv.Atoi(lo)
		end, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || start < 0 || end >= Slots || start > end {
			return nil, bad("slot range %q is not START-END with 0 <= START <= END <= %d", f[0], Slots-1)
		}
		if err := checkNodeAddr(f[1]); err != nil {
			return nil, bad("%v", err)
		}
		m.Ranges = append(m.Ranges, SlotRange{Start: start, End: end, Node: f[1]})
		addNode(f[1])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSlotMap, err)
	}
	for _, a := range spare {
		addNode(a)
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}

// check sorts the ranges and verifies they cover every slot once.
func (m *SlotMap) check() error {
	slices.SortFunc(m.Ranges, func(a, b SlotRange) int { return a.Start - b.Start })
	next := 0
	for _, r := range m.Ranges {
		switch {
		case r.Start < next:
			return fmt.Errorf("%w: slots %d-%d overlap a range before them", ErrBadSlotMap, r.Start, min(r.End, next-1))
		case r.Start > next:
			return fmt.Errorf("%w: slots %d-%d are not owned by any node", ErrBadSlotMap, next, r.Start-1)
		}
		next = r.End + 1
	}
	if next != Slots {
		return fmt.Errorf("%w: slots %d-%d are not owned by any node", ErrBadSlotMap, next, Slots-1)
	}
	return nil
}

// checkNodeAddr checks a node address: HOST:PORT with a port.
func checkNodeAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("node address %q is not HOST:PORT", a)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("node address %q has no port 1-65535", a)
	}
	if host == "" {
		return fmt.Errorf("node address %q has no host", a)
	}
	return nil
}

// String writes the map in the format [ParseSlotMap] reads.
func (m *SlotMap) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d\n", m.Epoch)
	owns := map[string]bool{}
	for _, r := range m.Ranges {
		fmt.Fprintf(&b, "%d-%d %s\n", r.Start, r.End, r.Node)
		owns[r.Node] = true
	}
	for _, a := range m.Nodes {
		if !owns[a] {
			fmt.Fprintf(&b, "node %s\n", a)
		}
	}
	return b.String()
}

// clone returns a deep copy of m.
func (m *SlotMap) clone() *SlotMap {
	return &SlotMap{Ranges: slices.Clone(m.Ranges), Nodes: slices.Clone(m.Nodes), Epoch: m.Epoch}
}

// find returns the index of the range holding slot.
func (m *SlotMap) find(slot int) int {
	i, _ := slices.BinarySearchFunc(m.Ranges, slot, func(r SlotRange, s int) int {
		switch {
		case r.End < s:
			return -1
		case r.Start > s:
			return 1
		}
		return 0
	})
	return i
}

// owner returns the node that owns slot.
func (m *SlotMap) owner(slot int) string { return m.Ranges[m.find(slot)].Node }
