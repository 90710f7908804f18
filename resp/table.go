package resp

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/fsperm"
	"github.com/streamdedup/dedup/internal/observeretry"
)

// DefaultTable is the table behind the plain Redis commands (SET NX,
// SETNX, EXISTS, DBSIZE): "SET k v NX" and "BF.ADD default k" mark the
// same key.
const DefaultTable = "default"

// tableFile is the file beside a table's engine directory that holds the
// options the table was created with.
const tableFile = "table.json"

// engineDir is the folder of a table's directory that the engine owns.
const engineDir = "engine"

// maxTableName is the longest table name accepted.
const maxTableName = 128

// TableOptions are the options a table was created with, persisted in
// DIR/<table>/table.json so that a restart reopens it as it was.
type TableOptions struct {
	// Window is how long the table remembers a key.
	Window time.Duration `json:"window"`
	// ExpectedRate is the distinct keys per second its filters are sized
	// for (BF.RESERVE's capacity spread over the window).
	ExpectedRate float64 `json:"expected_rate"`
	// FalsePositiveRate is the filters' target (BF.RESERVE's error_rate).
	FalsePositiveRate float64 `json:"false_positive_rate"`
	// Probabilistic keeps no exact store.
	Probabilistic bool `json:"probabilistic"`
	// Capacity is what BF.INFO reports: the keys the window is sized for.
	Capacity uint64 `json:"capacity"`
	// ExplicitDone gives the table per-key completion
	// ([dedup.Options.ExplicitDone]): a key observed New stays in flight,
	// across the server's commits, until DEDUP.DONE marks it processed
	// or DEDUP.FORGET releases it. DEDUP.RESERVE ... EXPLICITDONE sets it.
	ExplicitDone bool `json:"explicit_done,omitempty"`
	// Refresh makes the table's window slide ([dedup.Options.Refresh]): a
	// duplicate renews its key, remembered Window after its last sighting.
	// DEDUP.RESERVE ... REFRESH sets it; a table keeps it across restarts
	// whatever the server's default.
	Refresh bool `json:"refresh,omitempty"`
}

// table is one named engine. Its lock orders close against everything
// else: commands hold it shared, close holds it alone, so that no command
// reaches the engine once close has made its last commit.
type table struct {
	name       string
	opts       TableOptions
	eng        *dedup.Engine
	commitKeys int64
	// plannedBytes and plannedFilters are what BF.INFO reports before the
	// filters fill (see filterPlan).
	plannedBytes   uint64
	plannedFilters int

	mu     sync.RWMutex
	closed bool // guarded by mu

	// fresh counts keys answered New since the last commit began; past
	// Options.CommitKeys it asks the commit loop for an early commit.
	fresh atomic.Int64
	kick  func()

	// handedOver is set once the table's state moved to another cluster
	// node, committed: a reply waiting for its commit is durable there.
	handedOver atomic.Bool
}

// added counts n keys that the next commit will take: answered New, or
// under ExplicitDone marked Done.
func (t *table) added(n int) {
	if n == 0 || t.kick == nil {
		return
	}
	if v := t.fresh.Add(int64(n)); v >= t.commitKeys && v-int64(n) < t.commitKeys {
		t.kick()
	}
}

// errTableClosed is answered to commands that reach a table while the
// server shuts down.
var errTableClosed = errors.New("resp: server is shutting down")

// validTableName reports whether name can be a table: it names a
// directory under the state root.
func validTableName(name string) bool {
	if name == "" || len(name) > maxTableName || name[0] == '.' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_', c == '-', c == '.', c == ':', c == '{', c == '}': // {} for cluster hash tags
		default:
			return false
		}
	}
	return true
}

// EngineDir is the engine's state directory of table under the state
// root: tools open it with the dedup package (dedup stats, backup).
func EngineDir(root, table string) string {
	return filepath.Join(root, table, engineDir)
}

// engineOptions are the engine options of a table with opts.
func (s *Server) engineOptions(name string, opts TableOptions) dedup.Options {
	o := s.cfg.Engine
	o.Window = opts.Window
	o.ExpectedRate = opts.ExpectedRate
	o.FalsePositiveRate = opts.FalsePositiveRate
	o.Probabilistic = opts.Probabilistic
	o.ExplicitDone = opts.ExplicitDone
	o.Refresh = opts.Refresh
	// The server commits (see Server.commitLoop) and snapshots itself:
	// the engine's own snapshots, periodic and at Close, are off.
	o.AutoCommit = 0
	o.SnapshotInterval = -1
	o.Dir = ""
	if s.cfg.Dir != "" {
		o.Dir = EngineDir(s.cfg.Dir, name)
	}
	return o
}

// defaultTableOptions are the options of a table created without
// BF.RESERVE: the server's.
func (s *Server) defaultTableOptions() TableOptions {
	e := s.cfg.Engine
	return TableOptions{
		Window:            e.Window,
		ExpectedRate:      e.ExpectedRate,
		FalsePositiveRate: e.FalsePositiveRate,
		Probabilistic:     e.Probabilistic,
		Capacity:          uint64(e.ExpectedRate * e.Window.Seconds()),
		ExplicitDone:      e.ExplicitDone,
		Refresh:           e.Refresh,
	}
}

// readTableOptions reads DIR/<name>/table.json; ok is false when the
// table does not exist on disk.
func (s *Server) readTableOptions(name string) (opts TableOptions, ok bool, err error) {
	if s.cfg.Dir == "" {
		return opts, false, nil
	}
	return ReadTableOptions(s.cfg.Dir, name)
}

// ReadTableOptions reads the options table was created with under the
// state root (a restart reopens it with them); ok is false when the table
// does not exist there. `dedup serve` adopts the default table's rate and
// false-positive target from it when no flag sets them.
func ReadTableOptions(root, table string) (opts TableOptions, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(root, table, tableFile))
	if errors.Is(err, os.ErrNotExist) {
		return opts, false, nil
	}
	if err != nil {
		return opts, false, fmt.Errorf("resp: table %q: %w", table, err)
	}
	if err := json.Unmarshal(b, &opts); err != nil {
		return opts, false, fmt.Errorf("resp: table %q: %s: %w", table, tableFile, err)
	}
	return opts, true, nil
}

// writeTableOptions writes DIR/<name>/table.json atomically.
func (s *Server) writeTableOptions(name string, opts TableOptions) error {
	if s.cfg.Dir == "" {
		return nil
	}
	dir := filepath.Join(s.cfg.Dir, name)
	if err := fsperm.MkdirAll(dir); err != nil {
		return fmt.Errorf("resp: table %q: %w", name, err)
	}
	b, err := json.MarshalIndent(opts, "", "  ")
	if err != nil {
		return fmt.Errorf("resp: table %q: %w", name, err)
	}
	tmp := filepath.Join(dir, tableFile+".tmp")
	if err := writeSync(tmp, append(b, '\n')); err != nil {
		return fmt.Errorf("resp: table %q: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, tableFile)); err != nil {
		return fmt.Errorf("resp: table %q: %w", name, err)
	}
	return syncDir(dir)
}

func writeSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, fsperm.FileMode)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// openTable opens (creating if need be) the engine of table name with
// opts and records opts beside it. A table it creates and the engine then
// refuses (options out of range, filters too large) leaves nothing on
// disk, so that the name is free for a BF.RESERVE that works.
func (s *Server) openTable(name string, opts TableOptions) (*table, error) {
	eo := s.engineOptions(name, opts)
	if err := eo.Validate(); err != nil {
		return nil, fmt.Errorf("resp: table %q: %w", name, err)
	}
	created := false
	if eo.Dir != "" {
		// Shards, generations and the filter are the state's own: a table
		// created under other server defaults reopens as it was made.
		if have, err := dedup.StateOptions(eo.Dir); err == nil {
			eo.Shards, eo.Generations, eo.Filter = have.Shards, have.Generations, have.Filter
		}
		_, err := os.Lstat(filepath.Join(s.cfg.Dir, name))
		created = errors.Is(err, os.ErrNotExist)
	}
	if err := s.writeTableOptions(name, opts); err != nil {
		return nil, errors.Join(err, s.removeCreated(name, created))
	}
	eng, err := dedup.Open(eo)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("resp: table %q: %w", name, err), s.removeCreated(name, created))
	}
	t := &table{name: name, opts: opts, eng: eng, commitKeys: int64(s.cfg.CommitKeys)}
	t.plannedBytes, t.plannedFilters = filterPlan(eo)
	if s.cfg.Fsync == FsyncEverySec {
		t.kick = s.kickCommit
	}
	return t, nil
}

// filterPlan is what BF.INFO reports before the engine has made its
// filters (they start small and follow the traffic): the filter memory the
// table's options allow at most ([dedup.Options.FilterCeiling]), and every
// shard's Generations+1 generations. A plan that cannot be computed is 0
// bytes.
func filterPlan(o dedup.Options) (bytes uint64, filters int) {
	o.WithDefaults()
	bytes, _ = o.FilterCeiling()
	return bytes, o.Shards * (o.Generations + 1)
}

// removeCreated removes the directory of table name when openTable
// created it, so that a table the engine refused leaves no trace.
func (s *Server) removeCreated(name string, created bool) error {
	if !created {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(s.cfg.Dir, name)); err != nil {
		return fmt.Errorf("resp: table %q: removing what a failed open created: %w", name, err)
	}
	return nil
}

// lookup returns the open table name, opening it from disk if it exists
// there; with create it creates a missing table with the server's
// defaults. It returns nil, nil for a missing table without create.
func (s *Server) lookup(name string, create bool) (*table, error) {
	if name == DefaultTable {
		return s.def, nil
	}
	s.tmu.RLock()
	t := s.tables[name]
	s.tmu.RUnlock()
	if t != nil {
		return t, nil
	}
	if !validTableName(name) {
		return nil, fmt.Errorf("invalid table name %q: up to %d of A-Z a-z 0-9 _ - . : { } not starting with '.'", name, maxTableName)
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if t := s.tables[name]; t != nil {
		return t, nil
	}
	if s.closing.Load() {
		return nil, errTableClosed
	}
	opts, ok, err := s.readTableOptions(name)
	if err != nil {
		return nil, err
	}
	if !ok {
		if !create {
			return nil, nil
		}
		opts = s.defaultTableOptions()
	}
	return s.addTableLocked(name, opts)
}

// addTableLocked opens a table and registers it; s.tmu is held.
func (s *Server) addTableLocked(name string, opts TableOptions) (*table, error) {
	if len(s.tables)+1 >= s.cfg.MaxTables {
		return nil, fmt.Errorf("too many tables: max-tables is %d", s.cfg.MaxTables)
	}
	t, err := s.openTable(name, opts)
	if err != nil {
		return nil, err
	}
	s.tables[name] = t
	return t, nil
}

// reserve creates table name with opts (BF.RESERVE); it fails when the
// table exists, open or on disk.
func (s *Server) reserve(name string, opts TableOptions) error {
	if name == DefaultTable {
		return errExists
	}
	if !validTableName(name) {
		return fmt.Errorf("invalid table name %q: up to %d of A-Z a-z 0-9 _ - . : { } not starting with '.'", name, maxTableName)
	}
	s.tmu.Lock()
	defer s.tmu.Unlock()
	if s.closing.Load() {
		return errTableClosed
	}
	if s.tables[name] != nil {
		return errExists
	}
	if _, ok, err := s.readTableOptions(name); err != nil {
		return err
	} else if ok {
		return errExists
	}
	_, err := s.addTableLocked(name, opts)
	return err
}

// errExists is RedisBloom's answer to BF.RESERVE of an existing name.
var errExists = errors.New("item exists")

// allTables returns the default table and every open table.
func (s *Server) allTables() []*table {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	ts := make([]*table, 0, len(s.tables)+1)
	ts = append(ts, s.def)
	for _, t := range s.tables {
		ts = append(ts, t)
	}
	return append(ts, s.clusterTables()...)
}

// observe observes keys into out under the shared lock. An error leaves
// none of keys in flight (see observeRetry).
func (t *table) observe(keys [][]byte, out []dedup.Verdict) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return errTableClosed
	}
	err := t.eng.ObserveBatch(keys, out)
	if err != nil {
		err = t.observeRetry(keys, out, err)
	}
	if err == nil && !t.opts.ExplicitDone {
		n := 0
		for _, v := range out {
			if v == dedup.New {
				n++
			}
		}
		t.added(n)
	}
	return err
}

// observeOne is observe of one key without a batch.
func (t *table) observeOne(key []byte) (dedup.Verdict, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return 0, errTableClosed
	}
	v, err := t.eng.Observe(key)
	if errors.Is(err, dedup.ErrTooManyInFlight) {
		keys, out := [][]byte{key}, []dedup.Verdict{0}
		err = t.observeRetry(keys, out, err)
		v = out[0]
	}
	if err != nil {
		return 0, err
	}
	if v == dedup.New && !t.opts.ExplicitDone {
		t.added(1)
	}
	return v, nil
}

// observeRetry finishes an observation of keys that failed with err, the
// verdicts given so far in out (observeretry.Finish: commit and observe
// again what is left while the engine's bound on keys in flight stops it,
// until a pass observes nothing, as on an EXPLICITDONE table whose keys
// are not Done). On an error it
// releases the keys of this call still in flight, so that a command
// answered an error leaves none behind to hold its retry; keys an
// intermediate commit made durable stay remembered. t.mu is held shared.
func (t *table) observeRetry(keys [][]byte, out []dedup.Verdict, err error) error {
	err = observeretry.Finish(t.eng, keys, out, err, func() { t.fresh.Store(0) })
	if err == nil {
		return nil
	}
	for i, v := range out[:len(keys)] {
		if v != dedup.New {
			continue
		}
		// A key the retry's commit made durable is not in flight any
		// more: ErrNotInFlight is expected for it.
		if ferr := t.eng.Forget(keys[i]); ferr != nil && !errors.Is(ferr, dedup.ErrNotInFlight) && !errors.Is(ferr, dedup.ErrAlreadyDone) {
			err = errors.Join(err, ferr)
		}
	}
	return err
}

// probe reports, for each key, whether the table holds it (committed or
// in flight) without marking it: [dedup.Engine.Peek] reads the verdict
// Observe would give and changes neither the key nor the verdict counts.
func (t *table) probe(keys [][]byte, out []bool) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return errTableClosed
	}
	for i, k := range keys {
		v, err := t.eng.Peek(k)
		if err != nil {
			return err
		}
		out[i] = v != dedup.New
	}
	return nil
}

// commit commits the table's keys in flight, with checkpoint when not nil.
func (t *table) commit(checkpoint []byte) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return errTableClosed
	}
	t.fresh.Store(0)
	return t.eng.Commit(checkpoint)
}

// snapshot writes a filter snapshot of the table.
func (t *table) snapshot() error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return errTableClosed
	}
	return t.eng.Snapshot()
}

// close commits what is in flight, writes a snapshot and closes the engine.
func (t *table) close(snapshot bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	err := t.eng.Commit(nil)
	if err == nil && snapshot {
		err = t.eng.Snapshot()
	}
	if err != nil {
		err = fmt.Errorf("resp: table %q: %w", t.name, err)
	}
	return errors.Join(err, t.eng.Close())
}

// stats returns the engine's stats.
func (t *table) stats() (dedup.Stats, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return dedup.Stats{}, errTableClosed
	}
	return t.eng.Stats(), nil
}

// forget releases keys in flight and returns how many were.
func (t *table) forget(keys [][]byte) (int, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return 0, errTableClosed
	}
	n := 0
	for _, k := range keys {
		err := t.eng.Forget(k)
		switch {
		case err == nil:
			n++
		case errors.Is(err, dedup.ErrNotInFlight), errors.Is(err, dedup.ErrAlreadyDone):
			// Not in flight, or Done and so on its way into the next
			// commit: not released, not counted.
		default:
			return n, err
		}
	}
	return n, nil
}

// errNoExplicitDone answers DEDUP.DONE on a table without per-key
// completion.
var errNoExplicitDone = fmt.Errorf("%w: its keys are done when the server commits them; "+
	"DEDUP.RESERVE table EXPLICITDONE creates a table whose keys wait for DEDUP.DONE", dedup.ErrNoExplicitDone)

// done marks keys in flight Done (DEDUP.DONE) and returns how many were:
// keys not in flight, or Done already, are not counted. An empty or
// oversized key fails the whole command, before any key is Done.
func (t *table) done(keys [][]byte) (int, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return 0, errTableClosed
	}
	if !t.opts.ExplicitDone {
		return 0, fmt.Errorf("table %q: %w", t.name, errNoExplicitDone)
	}
	err := t.eng.DoneBatch(keys)
	n := len(keys)
	if err != nil {
		// DoneBatch joins one error per key it did not mark: those not in
		// flight or Done already are answered by the count, any other
		// error by an error.
		j, ok := err.(interface{ Unwrap() []error })
		if !ok {
			return 0, err
		}
		for _, e := range j.Unwrap() {
			if !errors.Is(e, dedup.ErrNotInFlight) && !errors.Is(e, dedup.ErrAlreadyDone) {
				return 0, err
			}
			n--
		}
	}
	t.added(n)
	return n, nil
}

// checkpoint returns the table's last committed checkpoint.
func (t *table) checkpoint() ([]byte, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closed {
		return nil, errTableClosed
	}
	return t.eng.Checkpoint(), nil
}
