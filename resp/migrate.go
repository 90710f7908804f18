package resp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup/handover"
	"github.com/streamdedup/dedup/internal/fsperm"
)

// Moving a slot range between nodes. The old owner (the source) drives it
// when sent DEDUP.CLUSTER MOVE START END TARGET:
//
//  1. it asks the target to import the range (DEDUP.CLUSTER IMPORT): the
//     target opens an empty import table for it and serves its keys
//     after ASKING only;
//  2. it stops marking keys of the range (rangeMigrating): a key its
//     engine holds is answered seen, any other -ASK the target, where the
//     import table answers it (and records it if New). The range's engine
//     is now frozen: it commits it and writes a backup of it, and of
//     every BF.*/DEDUP.* table whose name hashes into the range (their
//     commands are answered -TRYAGAIN meanwhile), and exports them through
//     the handover store;
//  3. it tells the target to finish (DEDUP.CLUSTER FINISH): the target
//     fetches and verifies the export, installs it, then, holding the
//     range alone for that moment, replays the keys its import table
//     answered New into the installed engine, commits, and owns the
//     range;
//  4. it gives the range up (-MOVED from now on), closes and removes its
//     copy, and tells every other node (DEDUP.CLUSTER SETRANGE).
//
// A key is thus marked on exactly one side at every moment: on the source
// before the freeze, in the target's import table after it, and the two
// meet in the target's engine at the end. A duplicate sent across the move
// is caught, and a first sighting is never answered seen.

// movePartition names a range's exports in the handover store.
func movePartition(start, end int) handover.Partition {
	return handover.Partition{Group: "dedup-serve-cluster", Topic: fmt.Sprintf("slots-%d-%d", start, end)}
}

// moveFormat is the Format of a range's export manifest.
const moveFormat = "dedup-serve-slot-range/1"

// moveTimeout bounds one step of a move between nodes.
const moveTimeout = 10 * time.Minute

// peer returns a client of another node, with this server's password.
func (s *Server) peer(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Password: s.cfg.RequirePass, Protocol: 2,
		ReadTimeout: moveTimeout, WriteTimeout: time.Minute, MaxRetries: -1, PoolSize: 1})
}

// clusterUsage is the syntax of DEDUP.CLUSTER.
const clusterUsage = "DEDUP.CLUSTER MOVE start end host:port | MAP | IMPORT start end source | FINISH start end epoch | ABORT start end | SETRANGE start end host:port epoch"

// cmdDedupCluster serves DEDUP.CLUSTER: MOVE (an operator's command to the
// range's owner), MAP (the node's current map) and the steps nodes send
// one another during a move.
func (s *Server) cmdDedupCluster(c *conn, _ *table, args [][]byte) {
	cl := s.cluster
	if !s.sharded() {
		c.WriteError("ERR DEDUP.CLUSTER needs a cluster slot map (dedup serve --cluster-map FILE)")
		return
	}
	sub := strings.ToLower(string(args[1]))
	if sub == "map" {
		cl.mu.RLock()
		m := cl.m.String()
		cl.mu.RUnlock()
		c.WriteBulkString(m)
		return
	}
	want := map[string]int{"move": 5, "import": 5, "finish": 5, "abort": 4, "setrange": 6}[sub]
	if want == 0 || len(args) != want {
		c.WriteError("ERR " + clusterUsage)
		return
	}
	start, err1 := strconv.Atoi(string(args[2]))
	end, err2 := strconv.Atoi(string(args[3]))
	if err1 != nil || err2 != nil {
		c.WriteError("ERR slots " + quote(args[2]) + " " + quote(args[3]) + " are not integers: " + clusterUsage)
		return
	}
	var err error
	reply := "OK"
	switch sub {
	case "move":
		err = cl.move(start, end, string(args[4]))
	case "import":
		reply, err = cl.beginImport(start, end, string(args[4]))
	case "finish":
		var epoch int64
		if epoch, err = strconv.ParseInt(string(args[4]), 10, 64); err == nil {
			err = cl.finishImport(start, end, epoch)
		}
	case "abort":
		err = cl.abortImport(start, end)
	case "setrange":
		var epoch int64
		if epoch, err = strconv.ParseInt(string(args[5]), 10, 64); err == nil {
			err = cl.setRange(start, end, string(args[4]), epoch)
		}
	}
	if err != nil {
		writeErr(c, err)
		return
	}
	c.WriteString(reply)
}

// mapRange returns the map's range START-END exactly, or an error.
func (cl *cluster) mapRange(start, end int) (SlotRange, error) {
	if start < 0 || end >= Slots || start > end {
		return SlotRange{}, fmt.Errorf("slots %d-%d are not a range of 0-%d", start, end, Slots-1)
	}
	r := cl.m.Ranges[cl.m.find(start)]
	if r.Start != start || r.End != end {
		return SlotRange{}, fmt.Errorf("slots %d-%d are not a range of the map (slot %d is in %d-%d): a range moves whole, so list finer ranges in the map to move less", start, end, start, r.Start, r.End)
	}
	return r, nil
}

// move moves the range START-END from this node to target. Once the
// target has accepted the import the move only goes forward: an error
// after that leaves it recorded and driven on in the background.
func (cl *cluster) move(start, end int, target string) error {
	s := cl.s
	if cl.opts.Handover == "" {
		return errors.New("moving a range needs a handover store (--cluster-handover URL) shared by the nodes")
	}
	cl.moveMu.Lock()
	defer cl.moveMu.Unlock()
	cl.mu.RLock()
	r, err := cl.mapRange(start, end)
	me, epoch := cl.me, cl.m.Epoch+1
	known := containsStr(cl.m.Nodes, target)
	rg := cl.ranges[start]
	cl.mu.RUnlock()
	switch {
	case err != nil:
		return err
	case r.Node != me || rg == nil:
		return fmt.Errorf("slots %d-%d belong to %s, not to this node (%s): send the move there", start, end, r.Node, me)
	case target == me:
		return fmt.Errorf("slots %d-%d are on %s already", start, end, me)
	case !known:
		return fmt.Errorf("%s is not a node of the map: add it (node HOST:PORT) to every node's map first", target)
	}
	rg.mu.RLock()
	moving, peer := rg.state == rangeMigrating, rg.peer
	rg.mu.RUnlock()
	if moving {
		return fmt.Errorf("slots %d-%d are moving to %s already", start, end, peer)
	}
	rec := moveRecord{start: start, end: end, target: target, epoch: epoch}
	if err := writeMoveRecord(s.cfg.Dir, rec); err != nil {
		return fmt.Errorf("recording the move of slots %d-%d: %w", start, end, err)
	}
	err = cl.drive(rec)
	if err == nil {
		return nil
	}
	rg.mu.RLock()
	moving = rg.state == rangeMigrating
	rg.mu.RUnlock()
	if !moving {
		// The target never took a key of the range: nothing to carry on.
		return errors.Join(err, removeMoveRecord(s.cfg.Dir, start, end))
	}
	cl.resumeMove(rec)
	return fmt.Errorf("%w; the move goes on in the background until %s owns slots %d-%d", err, target, start, end)
}

// drive takes a recorded move as far as it goes: the target imports, the
// range migrates (marks go to the target), is exported, the target
// installs it, and this node hands it off. Every step may be repeated
// after a crash of either side. cl.moveMu is held.
func (cl *cluster) drive(rec moveRecord) error {
	s := cl.s
	start, end, target, epoch := rec.start, rec.end, rec.target, rec.epoch
	cl.mu.RLock()
	rg := cl.ranges[start]
	me := cl.me
	cl.mu.RUnlock()
	if rg == nil {
		return nil // handed off already
	}
	ctx := context.Background()
	p := s.peer(target)
	defer p.Close()
	reply, err := p.Do(ctx, "dedup.cluster", "import", start, end, me).Text()
	if err != nil {
		return fmt.Errorf("target %s refused to import slots %d-%d: %w", target, start, end, err)
	}
	if reply != "OWNED" {
		rg.mu.Lock()
		rg.state, rg.peer = rangeMigrating, target
		rg.mu.Unlock()
		hook("migrating")
		if err := s.exportRange(ctx, rg, epoch); err != nil {
			return fmt.Errorf("exporting slots %d-%d: %w", start, end, err)
		}
		hook("exported")
		if err := p.Do(ctx, "dedup.cluster", "finish", start, end, epoch).Err(); err != nil {
			return fmt.Errorf("target %s could not finish importing slots %d-%d: %w", target, start, end, err)
		}
		hook("finished")
	}
	// The target owns the range now: give it up.
	names, err := s.rangeTables(start, end)
	if err != nil {
		return err
	}
	if err := cl.setRangeLocked(start, end, target, epoch, true); err != nil {
		return fmt.Errorf("slots %d-%d moved to %s, but the map could not be saved: %w", start, end, target, err)
	}
	if err := removeMoveRecord(s.cfg.Dir, start, end); err != nil {
		s.logf("resp: slots %d-%d moved to %s; removing the move record: %v", start, end, target, err)
	}
	rg.mu.Lock()
	rg.state = rangeGone
	t := rg.t
	rg.t = nil
	rg.mu.Unlock()
	var errs []error
	if t != nil {
		t.handedOver.Store(true)
		errs = append(errs, t.close(false), os.RemoveAll(filepath.Join(s.cfg.Dir, t.name)))
	}
	for _, name := range names {
		errs = append(errs, s.dropTable(name))
	}
	if err := errors.Join(errs...); err != nil {
		s.logf("resp: slots %d-%d moved to %s; removing the local copy: %v", start, end, target, err)
	}
	cl.mu.RLock()
	nodes := cl.m.Nodes
	cl.mu.RUnlock()
	for _, n := range nodes {
		if n == me || n == target {
			continue
		}
		q := s.peer(n)
		if err := q.Do(ctx, "dedup.cluster", "setrange", start, end, target, epoch).Err(); err != nil {
			// It answers -MOVED to this node, which answers -MOVED to the
			// target: clients still reach the range.
			s.logf("resp: telling %s that slots %d-%d moved to %s: %v", n, start, end, target, err)
		}
		q.Close()
	}
	return nil
}

// rangeTables lists the BF.*/DEDUP.* tables whose name hashes into
// START-END: those open and those on disk.
func (s *Server) rangeTables(start, end int) ([]string, error) {
	seen := map[string]bool{}
	in := func(name string) bool {
		sl := KeySlot([]byte(name))
		return name != DefaultTable && validTableName(name) && sl >= start && sl <= end
	}
	s.tmu.RLock()
	for name := range s.tables {
		if in(name) {
			seen[name] = true
		}
	}
	s.tmu.RUnlock()
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if e.IsDir() && in(e.Name()) {
			if _, err := os.Stat(filepath.Join(s.cfg.Dir, e.Name(), tableFile)); err == nil {
				seen[e.Name()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	return out, nil
}

// exportRange commits and backs up the range's engine and its named
// tables, and exports them as one export of epoch. The named tables'
// commands are answered -TRYAGAIN (the range migrates).
func (s *Server) exportRange(ctx context.Context, rg *slotRange, epoch int64) error {
	names, err := s.rangeTables(rg.start, rg.end)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(s.cfg.Dir, ".export-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	backup := func(t *table) error {
		if err := t.commit(nil); err != nil {
			return err
		}
		if err := fsperm.MkdirAll(filepath.Join(dir, t.name)); err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(s.cfg.Dir, t.name, tableFile))
		if err != nil {
			return err
		}
		if err := writeSync(filepath.Join(dir, t.name, tableFile), b); err != nil {
			return err
		}
		t.mu.RLock()
		defer t.mu.RUnlock()
		if t.closed {
			return errTableClosed
		}
		return t.eng.Backup(filepath.Join(dir, t.name, engineDir))
	}
	if err := backup(rg.t); err != nil {
		return fmt.Errorf("table %q: %w", rg.t.name, err)
	}
	for _, name := range names {
		t, err := s.lookup(name, false)
		if err == nil && t != nil {
			err = backup(t)
		}
		if err != nil {
			return fmt.Errorf("table %q: %w", name, err)
		}
	}
	st, err := handover.Open(ctx, s.cluster.opts.Handover)
	if err != nil {
		return err
	}
	defer st.Close()
	_, _, err = st.Export(ctx, movePartition(rg.start, rg.end), dir,
		handover.Manifest{Offset: epoch, Window: s.cfg.Engine.Window, Format: moveFormat}, nil)
	return err
}

// dropTable closes a named table that moved away and removes its state.
func (s *Server) dropTable(name string) error {
	s.tmu.Lock()
	t := s.tables[name]
	delete(s.tables, name)
	s.tmu.Unlock()
	var err error
	if t != nil {
		t.handedOver.Store(true)
		err = t.close(false)
	}
	return errors.Join(err, os.RemoveAll(filepath.Join(s.cfg.Dir, name)))
}

// setRange records that node owns START-END from epoch on (sent by a
// node that moved the range).
func (cl *cluster) setRange(start, end int, node string, epoch int64) error {
	cl.mu.RLock()
	mine := cl.ranges[start] != nil
	cl.mu.RUnlock()
	if mine {
		return fmt.Errorf("slots %d-%d are on this node or moving here: only a move changes their owner", start, end)
	}
	return cl.setRangeLocked(start, end, node, epoch, false)
}

// setRangeLocked changes the owner of START-END in the map, saves it
// under the state root, and, with drop, forgets the range's state here.
func (cl *cluster) setRangeLocked(start, end int, node string, epoch int64, drop bool) error {
	m, err := cl.withOwner(start, end, node, epoch)
	if err != nil {
		return err
	}
	if err := cl.saveMap(m); err != nil {
		return err
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if m.Epoch >= cl.m.Epoch {
		cl.m = m
	}
	if drop {
		delete(cl.ranges, start)
	}
	return nil
}

// withOwner returns the current map with node owning START-END from
// epoch on.
func (cl *cluster) withOwner(start, end int, node string, epoch int64) (*SlotMap, error) {
	if err := checkNodeAddr(node); err != nil {
		return nil, err
	}
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	if _, err := cl.mapRange(start, end); err != nil {
		return nil, err
	}
	m := cl.m.clone()
	m.Ranges[m.find(start)].Node = node
	m.Epoch = max(m.Epoch, epoch)
	if !containsStr(m.Nodes, node) {
		m.Nodes = append(m.Nodes, node)
	}
	return m, nil
}

// saveMap writes m durably as the node's map under the state root.
func (cl *cluster) saveMap(m *SlotMap) error {
	if cl.s.cfg.Dir == "" {
		return nil
	}
	cl.saveMu.Lock()
	defer cl.saveMu.Unlock()
	tmp := filepath.Join(cl.s.cfg.Dir, clusterMapFile+".tmp")
	if err := writeSync(tmp, []byte(m.String())); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(cl.s.cfg.Dir, clusterMapFile)); err != nil {
		return err
	}
	return syncDir(cl.s.cfg.Dir)
}

func init() {
	register(command{name: "dedup.cluster", arity: -2, run: (*Server).cmdDedupCluster})
}
