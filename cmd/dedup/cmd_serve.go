package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// serveConfig holds the flags of `dedup serve`.
type serveConfig struct {
	listen           string
	state            string
	engine           engineFlags
	fsync            string
	requirepass      string
	protectedMode    bool
	maxClients       int
	maxArgSize       int
	maxTables        int
	maxKey           int
	metrics          string
	snapshotInterval time.Duration
	backupDir        string
	cluster          clusterFlags
}

const serveHelpHead = `Usage: dedup serve [--listen ADDR] [--state DIR] [flags]

Serve dedup over the Redis protocol (RESP2, and RESP3 after HELLO 3): any
Redis client deduplicates unchanged with SET key value NX [EX s], SETNX and
EXISTS, RedisBloom's BF.RESERVE/ADD/MADD/INSERT/EXISTS/MEXISTS/INFO/CARD
over named tables,
DEDUP.RESERVE/OBSERVE/FORGET/DONE/COMMIT/CHECKPOINT/STATS for verdicts,
checkpoints and worker pools (DEDUP.RESERVE table EXPLICITDONE: keys stay
in flight until DEDUP.DONE), and DEDUP.BEGIN/COMPLETE/RELEASE/GET for
idempotency keys with stored results (docs/idempotency.md).

Flags:
`

const serveHelpTail = `
A key is remembered for --window: SET NX with an EX longer than the window
is an error, a shorter EX holds as "at least". Each table keeps its state
in DIR/<table> (the plain commands use DIR/default).

Durability (--fsync): always answers a write only after the group commit
holding it is fsynced, and loses nothing answered on a crash; everysec
commits every second (and every 65536 keys), losing about the last second
on a crash; no commits at each snapshot (--snapshot-interval), losing the
keys since. SIGTERM or SIGINT: stop accepting, commit, snapshot, exit 0.

Examples:
  dedup serve --state ./state
  redis-cli -p 6380 SET order:42 1 NX EX 3600     # OK, then (nil) on a repeat
  dedup serve --listen 0.0.0.0:6380 --state ./state --fsync always --requirepass "$PASS"
`

func newServeFlags(e *env) (*flag.FlagSet, *serveConfig) {
	c := &serveConfig{}
	fs := newFlags(e, "dedup serve", serveHelpHead, serveHelpTail)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:6380", "listen on `ADDR` (host:port; the default is loopback only)")
	fs.StringVar(&c.state, "state", "", "state `DIR`: each table in DIR/<table> (default: in memory, lost on exit)")
	c.engine.register(fs, tuneUsage)
	fs.StringVar(&c.fsync, "fsync", resp.FsyncEverySec, "durability: always, everysec or no")
	fs.StringVar(&c.requirepass, "requirepass", "", "clients must AUTH with `SECRET` first (default $DEDUP_REQUIREPASS; none if unset)")
	fs.BoolVar(&c.protectedMode, "protected-mode", true, "without --requirepass, serve loopback clients only (others are answered -DENIED), as Redis")
	fs.IntVar(&c.maxClients, "max-clients", 10000, "serve at most `N` connections at once")
	fs.IntVar(&c.maxArgSize, "max-arg-size", 1<<20, "refuse (and disconnect) a request with an argument over `BYTES`")
	fs.IntVar(&c.maxKey, "max-key", 4096, "refuse keys over `N` bytes (at most 65536, what the exact store holds)")
	fs.IntVar(&c.maxTables, "max-tables", 64, "serve at most `N` tables (BF.* and DEDUP.* names, the default one included): each is an engine")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics on `ADDR` (e.g. 127.0.0.1:9090) at /metrics")
	fs.StringVar(&c.backupDir, "backup-dir", "", "write backups (DEDUP.BACKUP, SAVE, BGSAVE) into `DIR`, outside --state, and nowhere else (default: backups off)")
	fs.DurationVar(&c.snapshotInterval, "snapshot-interval", time.Minute, "snapshot every table's filters every `DURATION` (under --fsync no, commit too)")
	c.cluster.register(fs)
	return fs, c
}

func runServe(e *env, args []string) error {
	fs, c := newServeFlags(e)
	if _, err := positionals(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	if c.requirepass == "" {
		c.requirepass = os.Getenv("DEDUP_REQUIREPASS")
	}
	// The server's config reads zero as "the default": refuse it here,
	// under the flag's name, rather than serve 10000 clients for a 0.
	for _, f := range []struct {
		name string
		v    int
	}{{"max-clients", c.maxClients}, {"max-arg-size", c.maxArgSize}, {"max-tables", c.maxTables}} {
		if f.v < 1 {
			return usagef("serve: --%s must be at least 1, got %d", f.name, f.v)
		}
	}
	if c.snapshotInterval <= 0 {
		return usagef("serve: --snapshot-interval must be positive, got %v", c.snapshotInterval)
	}
	if err := checkAddr("--listen", c.listen); err != nil {
		return err
	}
	if c.metrics != "" {
		if err := checkAddr("--metrics", c.metrics); err != nil {
			return err
		}
	}
	opts, err := serveEngineOptions(c, explicitFlags(fs))
	if err != nil {
		return err
	}
	cfg := resp.Options{
		Dir:              c.state,
		BackupDir:        c.backupDir,
		Engine:           opts,
		Fsync:            c.fsync,
		SnapshotInterval: c.snapshotInterval,
		RequirePass:      c.requirepass,
		Unprotected:      !c.protectedMode,
		MaxClients:       c.maxClients,
		MaxArgSize:       c.maxArgSize,
		MaxTables:        c.maxTables,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(e.stderr, "dedup serve: "+format+"\n", args...)
		},
	}
	// Listen first: a port in use fails at once, without opening (or
	// creating) the state.
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return listenErr("serve", "listen", c.listen, err)
	}
	if cfg.Cluster, err = c.cluster.options(ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		ln.Close()
		return usageErr(err)
	}
	srv, err := resp.New(cfg)
	if err != nil {
		ln.Close()
		if c.state != "" {
			return stateErr(c.state, err)
		}
		return err
	}
	stopMetrics := func() error { return nil }
	if c.metrics != "" {
		if stopMetrics, err = listenMetrics("serve", c.metrics, newServeCollector(srv)); err != nil {
			return errors.Join(err, ln.Close(), srv.Shutdown())
		}
	}
	if host, _, _ := net.SplitHostPort(c.listen); !isLoopback(host) && c.requirepass == "" {
		if c.protectedMode {
			fmt.Fprintf(e.stderr, "dedup serve: protected mode: listening on %s without --requirepass, so clients from other hosts are refused (-DENIED); set --requirepass, or --protected-mode=false on a trusted network\n", c.listen)
		} else {
			fmt.Fprintf(e.stderr, "dedup serve: warning: listening on %s without --requirepass and with --protected-mode=false: anyone who reaches it can mark keys\n", c.listen)
		}
	}
	state := c.state
	if state == "" {
		state = "in memory"
	}
	fmt.Fprintf(e.stderr, "dedup serve: listening on %s (fsync %s, window %v, state %s)\n", ln.Addr(), c.fsync, opts.Window, state)

	// The tables are open: what start-up read of the binary (about 48 MiB
	// of a server's resident set, mapped in 2 MiB blocks) need not stay
	// resident while the server runs.
	releaseStartupPages()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	idle := make(chan struct{})
	defer close(idle)
	go releaseWhenIdle(func() uint64 { return srv.Stats().Commands }, time.Second, idle)
	var serveErr error
	select {
	case <-e.sigs:
		fmt.Fprintln(e.stderr, "dedup serve: shutting down: committing and writing snapshots")
	case serveErr = <-served:
	}
	err = errors.Join(srv.Shutdown(), stopMetrics())
	if serveErr == nil {
		serveErr = <-served
	}
	if errors.Is(serveErr, resp.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, err)
}

// serveEngineOptions returns the engine options of dedup serve's default
// table: the flags', checked under their names, and with --state the
// shape the table was created with.
func serveEngineOptions(c *serveConfig, explicit map[string]bool) (dedup.Options, error) {
	opts := c.engine.options("")
	opts.MaxKeySize = c.maxKey
	if err := c.engine.checkAuto(explicit); err != nil {
		return opts, err
	}
	if opts.AutoWindow != nil {
		// Tables take their window from BF.RESERVE and DEDUP.RESERVE; the
		// self-sizing window is not wired through them.
		return opts, usagef("--window auto: dedup serve takes a fixed --window (dedup filter and dedup kafka size it)")
	}
	// The engine's options, as the default table's engine gets them:
	// a bad value is an error naming its flag.
	tableDir := ""
	if c.state != "" {
		tableDir = resp.EngineDir(c.state, resp.DefaultTable)
	}
	eo := c.engine.options(tableDir)
	eo.MaxKeySize = c.maxKey
	if err := checkOptions(eo, explicit); err != nil {
		return opts, err
	}
	if c.state != "" {
		// The default table keeps the shape it was created with; a flag
		// that contradicts it is an error naming both.
		dir := resp.EngineDir(c.state, resp.DefaultTable)
		if err := adoptState(dir, explicit, &opts); err != nil {
			return opts, err
		}
		// The rate and the false-positive target size the filters of the
		// generations to come: a flag retunes them, no flag keeps them as
		// the table was sized, as a named table keeps its BF.RESERVE.
		have, ok, err := resp.ReadTableOptions(c.state, resp.DefaultTable)
		if err != nil {
			return opts, stateErr(c.state, err)
		}
		if ok && !explicit["rate"] {
			opts.ExpectedRate = have.ExpectedRate
		}
		if ok && !explicit["fp"] {
			opts.FalsePositiveRate = have.FalsePositiveRate
		}
		// The default table keeps its window kind: --refresh against it
		// is an error, not ignored.
		if ok && explicit["refresh"] && have.Refresh != opts.Refresh {
			return opts, usageErr(fmt.Errorf("--refresh=%v: the default table in %s was created with refresh %v", opts.Refresh, c.state, have.Refresh))
		}
		if ok {
			opts.Refresh = have.Refresh
		}
	}
	return opts, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveCollector exports every table's engine metrics (the dedup_engine_*
// of `dedup filter`, labelled by table) and the server's own counters.
type serveCollector struct {
	srv    *resp.Server
	engine map[string]*prometheus.Desc
	server map[string]*prometheus.Desc
}

// serveMetricDefs are the server's own metrics.
var serveMetricDefs = []struct {
	name, help string
	counter    bool
	value      func(resp.ServerStats) float64
}{
	{"dedup_serve_clients", "Connections served now.", false, func(s resp.ServerStats) float64 { return float64(s.Clients) }},
	{"dedup_serve_connections_total", "Connections accepted or refused.", true, func(s resp.ServerStats) float64 { return float64(s.TotalConnections) }},
	{"dedup_serve_rejected_connections_total", "Connections refused at --max-clients.", true, func(s resp.ServerStats) float64 { return float64(s.RejectedConnections) }},
	{"dedup_serve_rejected_requests_total", "Requests over a size limit (each closed its connection).", true, func(s resp.ServerStats) float64 { return float64(s.RejectedRequests) }},
	{"dedup_serve_accept_errors_total", "Failed accepts, such as running out of file descriptors (ulimit -n).", true, func(s resp.ServerStats) float64 { return float64(s.AcceptErrors) }},
	{"dedup_serve_commands_total", "Commands served.", true, func(s resp.ServerStats) float64 { return float64(s.Commands) }},
	{"dedup_serve_net_input_bytes_total", "Bytes read from clients.", true, func(s resp.ServerStats) float64 { return float64(s.NetInputBytes) }},
	{"dedup_serve_fsync_commits_total", "Commits requested for --fsync always replies.", true, func(s resp.ServerStats) float64 { return float64(s.Syncs) }},
	{"dedup_serve_used_memory_bytes", "Resident memory of the server process.", false, func(s resp.ServerStats) float64 { return float64(s.UsedMemory) }},
}

func newServeCollector(srv *resp.Server) *serveCollector {
	c := &serveCollector{srv: srv, engine: map[string]*prometheus.Desc{}, server: map[string]*prometheus.Desc{}}
	for _, d := range metricDefs {
		if _, ok := engineMetricValues(resp.TableStats{}.Stats)[d.name]; ok {
			c.engine[d.name] = prometheus.NewDesc(d.name, d.help, []string{"table"}, nil)
		}
	}
	for _, d := range serveMetricDefs {
		c.server[d.name] = prometheus.NewDesc(d.name, d.help, nil, nil)
	}
	return c
}

// Describe sends every metric's description.
func (c *serveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.engine {
		ch <- d
	}
	for _, d := range c.server {
		ch <- d
	}
}

// Collect reads every table's Stats and the server's counters once.
func (c *serveCollector) Collect(ch chan<- prometheus.Metric) {
	kind := func(counter bool) prometheus.ValueType {
		if counter {
			return prometheus.CounterValue
		}
		return prometheus.GaugeValue
	}
	for _, t := range c.srv.Tables() {
		vals := engineMetricValues(t.Stats)
		for _, d := range metricDefs {
			if desc, ok := c.engine[d.name]; ok {
				ch <- prometheus.MustNewConstMetric(desc, kind(d.counter), vals[d.name], t.Name)
			}
		}
	}
	st := c.srv.Stats()
	for _, d := range serveMetricDefs {
		ch <- prometheus.MustNewConstMetric(c.server[d.name], kind(d.counter), d.value(st))
	}
}

// listenErr names cmd and its --flag in a failure to listen on addr. An address
// that is not this machine's (a host name that does not resolve, an IP of
// another host) is bad usage, exit 2, as a malformed one is; a port in use
// or refused is a failure of the run, exit 1.
func listenErr(cmd, flag, addr string, err error) error {
	err = fmt.Errorf("%s: --%s %q: %w", cmd, flag, addr, err)
	var dns *net.DNSError
	var ae *net.AddrError
	if errors.As(err, &dns) || errors.As(err, &ae) || errors.Is(err, syscall.EADDRNOTAVAIL) {
		return usageErr(err)
	}
	return err
}
