package resp

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClusterOptions make a [Server] answer as a node of a Redis Cluster, so
// that cluster clients (go-redis ClusterClient, redis-py RedisCluster,
// ioredis Cluster, node-redis createCluster) connect unchanged.
//
// Without a Map the server is the emulated cluster of one node that owns
// every slot, as Dragonfly's emulated mode: CLUSTER SLOTS, SHARDS, NODES,
// INFO, MYID and KEYSLOT answer so, and the state is the single node's.
//
// With a Map (the same on every node) the server owns the ranges the map
// gives Announce: a key of a slot another node owns is answered
// -MOVED SLOT HOST:PORT, a command whose keys hash to different slots
// -CROSSSLOT. The plain commands (SET NX, SETNX, EXISTS) keep one engine
// per slot range, under Dir/@slots-START-END, so that a range moves to
// another node by copying its engine (DEDUP.CLUSTER MOVE, see
// docs/serve.md), never by scanning keys. A BF.* or DEDUP.* table routes
// by its name and lives whole on the node owning the name's slot.
type ClusterOptions struct {
	// Map is the cluster's static slot map; nil makes the emulated
	// cluster of one node.
	Map *SlotMap
	// Announce is this node's address as clients reach it, HOST:PORT,
	// one of Map's nodes. Default (emulated mode only) 127.0.0.1 and the
	// port the server listens on.
	Announce string
	// Handover is the URL of the blob store (gocloud.dev/blob: file:///DIR,
	// s3://...) through which a slot range's state moves between nodes
	// (see the handover package). "" refuses moves. Default "".
	Handover string
}

// Cluster error replies.
const (
	errCrossSlot = "CROSSSLOT Keys in request don't hash to the same slot"
	errTryAgain  = "TRYAGAIN slot is moving between nodes, retry"
)

// rangeState is what a node does with a slot range's commands.
type rangeState uint8

const (
	// rangeOwned: the node serves the range.
	rangeOwned rangeState = iota
	// rangeMigrating: the node owns the range and moves it to another: a
	// key it holds is answered here, any other key -ASK the target, and
	// no key is marked here any more.
	rangeMigrating
	// rangeImporting: another node moves the range here: only commands
	// after ASKING are served, into the range's import table.
	rangeImporting
	// rangeGone: the range moved away; commands are answered -MOVED.
	rangeGone
)

// slotRange is one slot range this node owns, or imports.
type slotRange struct {
	start, end int

	// mu orders commands against moves: every command on a key of the
	// range holds it shared while it runs, a move holds it alone to
	// change state, so that no key is marked after the state moved on.
	mu    sync.RWMutex
	state rangeState // guarded by mu
	t     *table     // the plain commands' engine of the range; guarded by mu
	// peer is the node the range migrates to (rangeMigrating) or from
	// (rangeImporting).
	peer string // guarded by mu
	// fresh is the import table (rangeImporting): keys first seen on this
	// node during the move. log holds every key sent to it, replayed into
	// t when the move finishes; logged counts them.
	fresh   *table // guarded by mu
	freshMu sync.Mutex
	log     *os.File // guarded by freshMu
	logged  int      // guarded by freshMu
	// logSynced is when log was last synced; guarded by freshMu.
	logSynced time.Time
}

// rangeTableName is the table of the plain commands' keys of a range.
func rangeTableName(start, end int) string { return fmt.Sprintf("@slots-%d-%d", start, end) }

// importTableName is the import table of a range moving here.
func importTableName(start, end int) string { return fmt.Sprintf("@import-%d-%d", start, end) }

// maxFreshKeys bounds the keys an import table records during a move;
// past it, new keys of the range are answered -TRYAGAIN until the move
// finishes.
const maxFreshKeys = 1 << 22

// cluster is a server's cluster state.
type cluster struct {
	s      *Server
	opts   ClusterOptions
	moveMu sync.Mutex // one move at a time on this node
	saveMu sync.Mutex // one write of the map file at a time

	// hasMap is set, once, when the node has a slot map (not emulated).
	hasMap bool

	mu     sync.RWMutex
	me     string             // guarded by mu; the announced address
	m      *SlotMap           // guarded by mu; nil in emulated mode
	ranges map[int]*slotRange // guarded by mu; by start slot: the ranges owned or imported here
}

// clusterMapFile is where a node keeps the map a move changed, under the
// state root.
const clusterMapFile = "cluster.map"

// validate checks the cluster options.
func (o *ClusterOptions) validate(dir string) []string {
	var bad []string
	if o.Announce != "" {
		if err := checkNodeAddr(o.Announce); err != nil {
			bad = append(bad, "Cluster.Announce: "+err.Error())
		}
	}
	if o.Map != nil {
		if err := o.Map.check(); err != nil {
			bad = append(bad, "Cluster.Map: "+err.Error())
		}
		if o.Announce == "" {
			bad = append(bad, "Cluster.Announce is needed with a Cluster.Map: it says which node this is")
		} else if !containsStr(o.Map.Nodes, o.Announce) {
			bad = append(bad, fmt.Sprintf("Cluster.Announce %s is not a node of Cluster.Map (%s)", o.Announce, strings.Join(o.Map.Nodes, ", ")))
		}
	} else if o.Handover != "" {
		bad = append(bad, "Cluster.Handover needs a Cluster.Map: the emulated cluster has one node")
	}
	if o.Handover != "" && dir == "" {
		bad = append(bad, "Cluster.Handover needs a state directory (Dir): a range moves as a backup of its engines")
	}
	return bad
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// openCluster sets up s's cluster state and opens the engines of the
// ranges this node owns.
func (s *Server) openCluster() error {
	o := s.cfg.Cluster
	cl := &cluster{s: s, opts: *o, me: o.Announce, ranges: map[int]*slotRange{}}
	s.cluster = cl
	if o.Map == nil {
		return nil
	}
	m := o.Map.clone()
	if s.cfg.Dir != "" {
		// A map a move wrote, of a higher epoch, beats the file.
		if saved, err := ReadSlotMap(filepath.Join(s.cfg.Dir, clusterMapFile)); err == nil {
			if saved.Epoch > m.Epoch {
				m = saved
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	cl.m, cl.hasMap = m, true
	for _, r := range m.Ranges {
		if r.Node != cl.me {
			continue
		}
		t, err := s.openTable(rangeTableName(r.Start, r.End), s.defaultTableOptions())
		if err != nil {
			cl.closeRanges()
			return err
		}
		cl.ranges[r.Start] = &slotRange{start: r.Start, end: r.End, t: t}
	}
	if s.cfg.Dir == "" {
		return nil
	}
	if err := cl.recoverMoves(); err != nil {
		cl.closeRanges()
		return err
	}
	return nil
}

// recoverMoves takes up the moves a crash interrupted (see movestate.go):
// an import not finished here imports on; a move recorded here is driven
// on, or, when the map says the target owns the range, its leftovers are
// removed.
func (cl *cluster) recoverMoves() error {
	s := cl.s
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		start, end, ok := parseRangeName(e.Name(), "@import-")
		if !ok || !e.IsDir() {
			continue
		}
		dir := filepath.Join(s.cfg.Dir, e.Name())
		src, err := os.ReadFile(filepath.Join(dir, importSourceFile))
		r := cl.m.Ranges[cl.m.find(start)]
		if err != nil || r.Start != start || r.End != end || r.Node == cl.me {
			// Never begun, or finished (the map says the range is here,
			// its keys replayed): stale.
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			continue
		}
		rg, err := s.openImport(start, end, strings.TrimSpace(string(src)))
		if err != nil {
			return err
		}
		cl.ranges[start] = rg
	}
	recs, err := readMoveRecords(s.cfg.Dir)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		rg := cl.ranges[rec.start]
		if rg != nil && rg.state == rangeOwned && rg.end == rec.end {
			rg.state, rg.peer = rangeMigrating, rec.target
			cl.resumeMove(rec)
			continue
		}
		// The range moved away: its copy here and the record are stale.
		var errs []error
		if rg == nil {
			errs = append(errs, os.RemoveAll(filepath.Join(s.cfg.Dir, rangeTableName(rec.start, rec.end))))
			names, err := s.rangeTables(rec.start, rec.end)
			errs = append(errs, err)
			for _, n := range names {
				errs = append(errs, os.RemoveAll(filepath.Join(s.cfg.Dir, n)))
			}
		}
		errs = append(errs, removeMoveRecord(s.cfg.Dir, rec.start, rec.end))
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// closeRanges closes every range table (a failed New).
func (cl *cluster) closeRanges() {
	for _, t := range cl.tables() {
		_ = t.close(false)
	}
}

// tables returns the range and import tables open on this node.
func (cl *cluster) tables() []*table {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	var ts []*table
	for _, rg := range cl.ranges {
		rg.mu.RLock()
		if rg.t != nil {
			ts = append(ts, rg.t)
		}
		if rg.fresh != nil {
			ts = append(ts, rg.fresh)
		}
		rg.mu.RUnlock()
	}
	return ts
}

// clusterTables returns the tables of the cluster's ranges, for the
// commit loop, stats and Shutdown.
func (s *Server) clusterTables() []*table {
	if !s.sharded() {
		return nil
	}
	return s.cluster.tables()
}

// sharded reports whether the plain commands' keys live in range tables.
func (s *Server) sharded() bool { return s.cluster != nil && s.cluster.hasMap }

// announce returns this node's address.
func (cl *cluster) announce() string {
	cl.mu.RLock()
	me := cl.me
	cl.mu.RUnlock()
	if me != "" {
		return me
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(cl.s.port()))
}

// slotMap returns the map clients are shown: the static one, or, emulated,
// this node owning every slot.
func (cl *cluster) slotMap() *SlotMap {
	cl.mu.RLock()
	m := cl.m
	cl.mu.RUnlock()
	if m != nil {
		return m
	}
	me := cl.announce()
	return &SlotMap{Ranges: []SlotRange{{0, Slots - 1, me}}, Nodes: []string{me}}
}

// nodeID is a node's 40-hex-digit ID: a hash of its address, so that
// every node names every other alike without gossip.
func nodeID(addr string) string {
	h := sha1.Sum([]byte(addr))
	return hex.EncodeToString(h[:])
}

// cmdCluster serves CLUSTER INFO | SLOTS | SHARDS | NODES | MYID |
// MYSHARDID | KEYSLOT key.
func (s *Server) cmdCluster(c *conn, _ *table, args [][]byte) {
	if s.cluster == nil {
		c.WriteError("ERR This instance has cluster support disabled (dedup serve --cluster enables it)")
		return
	}
	cl := s.cluster
	sub := strings.ToLower(string(args[1]))
	if sub == "keyslot" {
		if len(args) != 3 {
			c.WriteError(errArgs("cluster|keyslot"))
			return
		}
		c.WriteInt(KeySlot(args[2]))
		return
	}
	if len(args) != 2 {
		c.WriteError(errArgs("cluster|" + sub))
		return
	}
	m := cl.slotMap()
	me := cl.announce()
	switch sub {
	case "info":
		owners := map[string]bool{}
		for _, r := range m.Ranges {
			owners[r.Node] = true
		}
		var b strings.Builder
		for _, kv := range [][2]string{
			{"cluster_enabled", "1"},
			{"cluster_state", "ok"},
			{"cluster_slots_assigned", strconv.Itoa(Slots)},
			{"cluster_slots_ok", strconv.Itoa(Slots)},
			{"cluster_slots_pfail", "0"},
			{"cluster_slots_fail", "0"},
			{"cluster_known_nodes", strconv.Itoa(len(m.Nodes))},
			{"cluster_size", strconv.Itoa(len(owners))},
			{"cluster_current_epoch", strconv.FormatInt(m.Epoch, 10)},
			{"cluster_my_epoch", strconv.FormatInt(m.Epoch, 10)},
			{"cluster_stats_messages_sent", "0"},
			{"cluster_stats_messages_received", "0"},
		} {
			b.WriteString(kv[0] + ":" + kv[1] + "\r\n")
		}
		c.WriteBulkString(b.String())
	case "myid", "myshardid":
		c.WriteBulkString(nodeID(me))
	case "slots":
		c.WriteArray(len(m.Ranges))
		for _, r := range m.Ranges {
			host, port := splitAddr(r.Node)
			c.WriteArray(3)
			c.WriteInt(r.Start)
			c.WriteInt(r.End)
			c.WriteArray(3)
			c.WriteBulkString(host)
			c.WriteInt(port)
			c.WriteBulkString(nodeID(r.Node))
		}
	case "shards":
		c.WriteArray(len(m.Nodes))
		for _, n := range m.Nodes {
			var slots []int
			for _, r := range m.Ranges {
				if r.Node == n {
					slots = append(slots, r.Start, r.End)
				}
			}
			host, port := splitAddr(n)
			c.WriteMap(2)
			c.WriteBulkString("slots")
			c.WriteArray(len(slots))
			for _, sl := range slots {
				c.WriteInt(sl)
			}
			c.WriteBulkString("nodes")
			c.WriteArray(1)
			c.WriteMap(7)
			for _, kv := range [][2]string{{"id", nodeID(n)}, {"ip", host}, {"endpoint", host}} {
				c.WriteBulkString(kv[0])
				c.WriteBulkString(kv[1])
			}
			c.WriteBulkString("port")
			c.WriteInt(port)
			c.WriteBulkString("role")
			c.WriteBulkString("master")
			c.WriteBulkString("replication-offset")
			c.WriteInt(0)
			c.WriteBulkString("health")
			c.WriteBulkString("online")
		}
	case "nodes":
		var b strings.Builder
		for _, n := range m.Nodes {
			host, port := splitAddr(n)
			flags := "master"
			if n == me {
				flags = "myself,master"
			}
			fmt.Fprintf(&b, "%s %s:%d@%d,%s %s - 0 0 %d connected", nodeID(n), host, port, port+10000, host, flags, m.Epoch)
			for _, r := range m.Ranges {
				if r.Node != n {
					continue
				}
				if r.Start == r.End {
					fmt.Fprintf(&b, " %d", r.Start)
				} else {
					fmt.Fprintf(&b, " %d-%d", r.Start, r.End)
				}
			}
			b.WriteString("\n")
		}
		c.WriteBulkString(b.String())
	default:
		c.WriteError("ERR unknown subcommand " + quote(args[1]) + " of CLUSTER: dedup supports INFO, SLOTS, SHARDS, NODES, MYID, MYSHARDID, KEYSLOT")
	}
}

// splitAddr splits a node address checked by checkNodeAddr.
func splitAddr(a string) (string, int) {
	host, port, _ := net.SplitHostPort(a)
	p, _ := strconv.Atoi(port)
	return host, p
}

func init() {
	register(
		command{name: "cluster", arity: -2, run: (*Server).cmdCluster},
		command{name: "asking", arity: 1, flags: flagFast, run: (*Server).cmdAsking},
		command{name: "readonly", arity: 1, flags: flagFast, run: (*Server).cmdReadWrite},
		command{name: "readwrite", arity: 1, flags: flagFast, run: (*Server).cmdReadWrite},
	)
}

// redisMode is what INFO and HELLO call the server: "cluster" on a
// cluster node.
func (s *Server) redisMode() string {
	if s.cluster != nil {
		return "cluster"
	}
	return "standalone"
}
