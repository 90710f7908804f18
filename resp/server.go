package resp

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup"
)

// Durability modes of [Options.Fsync].
const (
	// FsyncAlways answers a command that marked keys only after a commit
	// holding them is fsynced. Commands of concurrent connections share
	// one commit (a group commit), so the cost is one fsync per round of
	// requests, not per key.
	FsyncAlways = "always"
	// FsyncEverySec commits every second: a crash loses at most the keys
	// acknowledged in the last second or so.
	FsyncEverySec = "everysec"
	// FsyncNo commits at each snapshot ([Options.SnapshotInterval]) and
	// when too many keys are in flight: a crash loses the keys since.
	FsyncNo = "no"
)

// Options configures a [Server]. The zero value of every field selects its
// documented default; [New] validates them all and names the bad one.
type Options struct {
	// Dir is the state root: each table keeps its state in Dir/<table>
	// (the plain Redis commands use the table [DefaultTable]). "" keeps
	// every table in memory, lost on Shutdown. Default "".
	Dir string

	// BackupDir is the only directory the server writes backups into
	// (DEDUP.BACKUP, SAVE, BGSAVE; see [Server.Backup]): a client names a
	// backup, never a path. It must lie outside Dir, and Dir must be set.
	// Default "": backups are off.
	BackupDir string

	// Engine holds the options of the default table and the defaults of
	// every table created without BF.RESERVE. Dir, AutoCommit and
	// SnapshotInterval are the server's to set and are ignored here.
	// Zero fields take the engine's defaults (see [dedup.Options]).
	Engine dedup.Options

	// Fsync is the durability mode: [FsyncAlways], [FsyncEverySec] or
	// [FsyncNo]. Default "everysec".
	Fsync string

	// SnapshotInterval is how often each table's filters are snapshotted
	// (and, under [FsyncNo], committed). Default 1m.
	SnapshotInterval time.Duration

	// RequirePass, when set, makes every connection AUTH with it before any
	// other command. Default "" (no password).
	RequirePass string

	// Unprotected serves clients from every address when RequirePass is
	// empty. By default a server without a password is in protected mode,
	// as Redis: a connection from an address other than loopback is
	// answered -DENIED and closed, so that a server listening beyond the
	// machine by mistake lets no one mark keys (and so drop events).
	// Default false.
	Unprotected bool

	// CommitKeys makes a table commit early, under FsyncEverySec, once
	// this many keys were answered New since its last commit: it bounds
	// the memory of keys in flight (and what a crash can lose) when the
	// rate is high. Default 65536.
	CommitKeys int

	// MaxClients bounds the connections served at once; a connection past
	// it is answered an error and closed. Default 10000.
	MaxClients int

	// MaxArgSize bounds one argument of a command, in bytes; a larger one
	// is answered an error and its connection closed. Default 1 MiB.
	MaxArgSize int

	// MaxArgs bounds the arguments of one command. Default 1<<20.
	MaxArgs int

	// MaxCommandSize bounds the argument bytes of one command. Default
	// 64 MiB.
	MaxCommandSize int

	// MaxPendingReplies bounds the replies a connection's pipeline keeps
	// buffered: past it they are written out (under FsyncAlways after
	// their commit) before more commands are served. Default 1024.
	MaxPendingReplies int

	// MaxReplyBuffer bounds the reply bytes a connection keeps queued for
	// a client that is not reading them yet. Clients such as go-redis and
	// redis-py send a whole pipeline before they read a reply: the server
	// reads on while the replies wait, up to this bound, past which it
	// stops reading the connection until the client reads. Default 64 MiB.
	MaxReplyBuffer int

	// MaxTables bounds the tables, the default one included: each is an
	// engine with its own memory and store. Default 64.
	MaxTables int

	// WriteTimeout closes a connection whose replies cannot be written
	// within it (a client that stopped reading). Default 30s.
	WriteTimeout time.Duration

	// Cluster, when set, makes the server a node of a Redis Cluster (see
	// [ClusterOptions]). Default nil: a standalone server.
	Cluster *ClusterOptions

	// Logf receives the server's rare log lines (failed commits and
	// snapshots). nil discards them. Default nil.
	Logf func(format string, args ...any)
}

// WithDefaults fills every zero field with its default and returns c.
func (c *Options) WithDefaults() *Options {
	c.Fsync = cmp.Or(c.Fsync, FsyncEverySec)
	c.SnapshotInterval = cmp.Or(c.SnapshotInterval, time.Minute)
	c.MaxClients = cmp.Or(c.MaxClients, 10000)
	c.CommitKeys = cmp.Or(c.CommitKeys, 1<<16)
	c.MaxArgSize = cmp.Or(c.MaxArgSize, 1<<20)
	c.MaxArgs = cmp.Or(c.MaxArgs, 1<<20)
	c.MaxCommandSize = cmp.Or(c.MaxCommandSize, 64<<20)
	c.MaxPendingReplies = cmp.Or(c.MaxPendingReplies, 1024)
	c.MaxTables = cmp.Or(c.MaxTables, 64)
	c.MaxReplyBuffer = cmp.Or(c.MaxReplyBuffer, 64<<20)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, 30*time.Second)
	c.Engine.WithDefaults()
	return c
}

// Validate reports every invalid field by name.
func (c *Options) Validate() error {
	var bad []string
	switch c.Fsync {
	case FsyncAlways, FsyncEverySec, FsyncNo:
	default:
		bad = append(bad, fmt.Sprintf("Fsync %q is not always, everysec or no", c.Fsync))
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxClients", c.MaxClients}, {"MaxArgSize", c.MaxArgSize}, {"MaxArgs", c.MaxArgs},
		{"MaxCommandSize", c.MaxCommandSize}, {"MaxPendingReplies", c.MaxPendingReplies},
		{"MaxTables", c.MaxTables}, {"CommitKeys", c.CommitKeys}, {"MaxReplyBuffer", c.MaxReplyBuffer},
	} {
		if f.v < 1 {
			bad = append(bad, fmt.Sprintf("%s %d < 1", f.name, f.v))
		}
	}
	if c.SnapshotInterval < 0 {
		bad = append(bad, fmt.Sprintf("SnapshotInterval %v < 0", c.SnapshotInterval))
	}
	if c.WriteTimeout < 0 {
		bad = append(bad, fmt.Sprintf("WriteTimeout %v < 0", c.WriteTimeout))
	}
	bad = append(bad, c.validateBackupDir()...)
	if c.Cluster != nil {
		bad = append(bad, c.Cluster.validate(c.Dir)...)
	}
	if c.Engine.AutoCommit != 0 {
		bad = append(bad, "Engine.AutoCommit is set: the server commits by Fsync")
	}
	// Each table's engine gets its own folder under Dir: check the
	// template as a table would be opened (Filter fuse needs a Dir).
	eo := c.Engine
	if c.Dir != "" && eo.Dir == "" {
		eo.Dir = EngineDir(c.Dir, DefaultTable)
	}
	err := eo.Validate()
	if len(bad) == 0 && err == nil {
		return nil
	}
	if len(bad) > 0 {
		err = errors.Join(fmt.Errorf("%w: %s", ErrInvalidOptions, strings.Join(bad, "; ")), err)
	}
	return err
}

// Server serves engines over RESP2, and RESP3 after HELLO 3: the plain Redis dedup idiom
// (SET key value NX EX, SETNX, EXISTS) on the default table, RedisBloom's
// BF.* names over named tables, and DEDUP.* for what Redis cannot say.
// All methods are safe for concurrent use.
type Server struct {
	cfg Options
	def *table

	tmu    sync.RWMutex
	tables map[string]*table // guarded by tmu; the default table is not in it

	cluster *cluster // nil when not a cluster node

	closing atomic.Bool
	started time.Time
	stop    chan struct{}
	kick    chan struct{} // asks commitLoop for an early commit
	loops   sync.WaitGroup

	// Counters for INFO.
	clients          atomic.Int64
	nextID           atomic.Int64
	totalConns       atomic.Uint64
	rejectedConns    atomic.Uint64
	rejectedRequests atomic.Uint64
	acceptErrors     atomic.Uint64
	commands         atomic.Uint64
	netInput         atomic.Uint64
	syncs            atomic.Uint64
	peakRSS          atomic.Uint64

	bk backupRun // backups (backup.go)

	mu      sync.Mutex
	serving bool               // guarded by mu
	shut    bool               // guarded by mu
	ln      net.Listener       // guarded by mu; the listener Serve serves
	served  map[*conn]struct{} // guarded by mu; the connections served
	connWG  sync.WaitGroup     // one per connection goroutine
}

// New opens the default table and returns a server ready to [Server.Serve].
func New(cfg Options) (*Server, error) {
	cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, tables: map[string]*table{}, started: time.Now(),
		stop: make(chan struct{}), kick: make(chan struct{}, 1), served: map[*conn]struct{}{}}
	defOpts := s.defaultTableOptions()
	// The default table keeps the window kind it was created with: a
	// server whose Engine.Refresh says otherwise is refused, not obeyed
	// on half of the keys.
	if have, ok, err := s.readTableOptions(DefaultTable); err != nil {
		return nil, err
	} else if ok && have.Refresh != defOpts.Refresh {
		return nil, fmt.Errorf("%w: table %q was created with refresh %v, Engine.Refresh is %v", ErrTableOptions, DefaultTable, have.Refresh, defOpts.Refresh)
	}
	def, err := s.openTable(DefaultTable, defOpts)
	if err != nil {
		return nil, err
	}
	s.def = def
	if cfg.Cluster != nil {
		if err := s.openCluster(); err != nil {
			return nil, errors.Join(err, def.close(false))
		}
	}
	s.loops.Add(1)
	go s.commitLoop()
	return s, nil
}

// Options returns the server's configuration, defaults filled in.
func (s *Server) Options() Options { return s.cfg }

// Serve serves connections from ln until [Server.Shutdown]; it returns
// [ErrServerClosed] then. ln is closed on return.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shut || s.serving {
		s.mu.Unlock()
		ln.Close()
		if s.serving {
			return errors.New("resp: Serve called twice")
		}
		return ErrServerClosed
	}
	s.serving = true
	s.ln = ln
	s.mu.Unlock()
	defer ln.Close()
	l := &limitListener{Listener: ln, srv: s}
	for {
		nc, err := l.Accept()
		if s.closing.Load() {
			if nc != nil {
				_ = nc.Close()
			}
			return ErrServerClosed
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			continue // counted, and backed off, by Accept
		}
		// Shutdown waits for the connections counted here: none is
		// counted once it has begun.
		s.mu.Lock()
		if s.shut {
			s.mu.Unlock()
			_ = nc.Close()
			return ErrServerClosed
		}
		s.connWG.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc)
	}
}

// limitListener backs off failed accepts.
type limitListener struct {
	net.Listener
	srv   *Server
	delay time.Duration // the backoff after the last failed Accept
}

// Accept accepts the next connection. A failure other than the listener
// closing (EMFILE when clients exhaust the file descriptors, ENOBUFS...)
// is counted and retried by Serve, so Accept sleeps before it returns
// one, from 5ms doubling to 1s, as net/http does: otherwise the accept
// loop spins a core for as long as the condition lasts.
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		l.srv.acceptErrors.Add(1)
		if l.delay == 0 {
			l.delay = 5 * time.Millisecond
			l.srv.logf("resp: accept: %v; retrying with backoff", err)
		} else {
			l.delay = min(2*l.delay, time.Second)
		}
		select {
		case <-time.After(l.delay):
		case <-l.srv.stop:
		}
		return nil, err
	}
	l.delay = 0
	return c, nil
}

// deniedMsg answers a client from another host in protected mode.
const deniedMsg = "-DENIED dedup serve is in protected mode: no password is set, so only " +
	"loopback clients are served. Set a password (--requirepass) and AUTH with it, or turn " +
	"protected mode off (--protected-mode=false) to serve every address without one.\r\n"

// isLocal reports whether a client's address is loopback, or not an IP
// address at all (a Unix socket).
func isLocal(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UDPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// markOne observes key in t for a command that answers one key's verdict
// (SET NX, SETNX, BF.ADD): it reports whether the key is new, marked as
// [Server.marked] says, or writes the error and reports !ok.
func (s *Server) markOne(c *conn, t *table, key []byte) (isNew, ok bool) {
	v, err := t.observeOne(key)
	if err != nil {
		writeErr(c, err)
		return false, false
	}
	if v == dedup.New {
		s.marked(c, t)
		return true, true
	}
	return false, true
}

// marked notes that a reply on cl acknowledges keys marked New in t.
// Under ExplicitDone no commit takes them before DEDUP.DONE: the reply
// waits for none.
func (s *Server) marked(c *conn, t *table) {
	if !t.opts.ExplicitDone {
		s.needSync(c, t)
	}
}

// needSync notes that a reply on cl promises keys of t durable: under
// FsyncAlways it is held until a commit of t (see endBatch).
func (s *Server) needSync(c *conn, t *table) {
	if s.cfg.Fsync != FsyncAlways {
		return
	}
	for _, d := range c.dirty {
		if d == t {
			return
		}
	}
	c.dirty = append(c.dirty, t)
}

// commitLoop commits every table each second under FsyncEverySec, and
// snapshots (under FsyncNo, commits and snapshots) every SnapshotInterval.
func (s *Server) commitLoop() {
	defer s.loops.Done()
	var tick <-chan time.Time
	if s.cfg.Fsync == FsyncEverySec {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	var snap <-chan time.Time
	if s.cfg.SnapshotInterval > 0 {
		t := time.NewTicker(s.cfg.SnapshotInterval)
		defer t.Stop()
		snap = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			for _, t := range s.allTables() {
				if t.fresh.Load() >= t.commitKeys {
					if err := t.commit(nil); err != nil && !errors.Is(err, errTableClosed) {
						s.logf("resp: table %q: commit: %v", t.name, err)
					}
				}
			}
		case <-tick:
			for _, t := range s.allTables() {
				if err := t.commit(nil); err != nil && !errors.Is(err, errTableClosed) {
					s.logf("resp: table %q: commit: %v", t.name, err)
				}
			}
		case <-snap:
			for _, t := range s.allTables() {
				var err error
				if s.cfg.Fsync == FsyncNo {
					err = t.commit(nil)
				}
				if err == nil {
					err = t.snapshot()
				}
				if err != nil && !errors.Is(err, errTableClosed) {
					s.logf("resp: table %q: snapshot: %v", t.name, err)
				}
			}
		}
	}
}

// kickCommit asks commitLoop for an early commit.
func (s *Server) kickCommit() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// Shutdown stops accepting connections, closes the ones served once their
// current command is answered, then commits every table, writes its
// snapshot and closes it. Keys answered before Shutdown are durable when
// it returns nil.
func (s *Server) Shutdown() error {
	s.mu.Lock()
	if s.shut {
		s.mu.Unlock()
		return nil
	}
	s.shut = true
	ln := s.ln
	s.mu.Unlock()
	s.closing.Store(true)
	close(s.stop)
	s.loops.Wait()
	s.bk.wg.Wait()
	if ln != nil {
		// Closing the listener ends the accept loop; closing each
		// connection ends its goroutine after the command it is serving.
		_ = ln.Close()
	}
	s.mu.Lock()
	for c := range s.served {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	ended := make(chan struct{})
	go func() { s.connWG.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
	}
	var errs []error
	for _, t := range s.allTables() {
		errs = append(errs, t.close(true))
	}
	return errors.Join(errs...)
}

// TableStats is one table's name, options and engine stats.
type TableStats struct {
	Name    string
	Options TableOptions
	Stats   dedup.Stats
}

// Tables returns the stats of the default table and of every open table.
func (s *Server) Tables() []TableStats {
	var out []TableStats
	for _, t := range s.allTables() {
		st, err := t.stats()
		if err != nil {
			continue
		}
		out = append(out, TableStats{Name: t.name, Options: t.opts, Stats: st})
	}
	return out
}

// ServerStats are the server's own counters.
type ServerStats struct {
	// Clients is the connections served now.
	Clients int64
	// TotalConnections counts connections accepted or refused.
	TotalConnections uint64
	// RejectedConnections counts connections refused at MaxClients.
	RejectedConnections uint64
	// RejectedRequests counts requests over a size limit (each closed
	// its connection).
	RejectedRequests uint64
	// AcceptErrors counts failed accepts, such as EMFILE when the clients
	// exhaust the process's file descriptors (see ulimit -n).
	AcceptErrors uint64
	// Commands counts commands served.
	Commands uint64
	// NetInputBytes counts bytes read from clients.
	NetInputBytes uint64
	// Syncs counts the commits requested for FsyncAlways replies (one per
	// pipeline and table; concurrent ones share a write).
	Syncs uint64
	// UsedMemory is the server's resident memory (see INFO memory).
	UsedMemory uint64
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{
		Clients:             s.clients.Load(),
		TotalConnections:    s.totalConns.Load(),
		RejectedConnections: s.rejectedConns.Load(),
		RejectedRequests:    s.rejectedRequests.Load(),
		AcceptErrors:        s.acceptErrors.Load(),
		Commands:            s.commands.Load(),
		NetInputBytes:       s.netInput.Load(),
		Syncs:               s.syncs.Load(),
		UsedMemory:          s.usedMemory(),
	}
}
