package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/streamdedup/dedup/internal/cputime"
)

// IdemConfig configures the idempotency-key comparison: one upstream API,
// called directly, through `dedup proxy`, and through the usual Redis
// build of the pattern (a reverse proxy in Go taking a SET NX PX lock and
// storing the response in Redis), by the same closed-loop HTTP clients.
type IdemConfig struct {
	// Requests is the number of requests with new keys per target and
	// round. Default 5,000.
	Requests int
	// Replays is the number of requests repeating stored keys per target
	// and round. Default 20,000.
	Replays int
	// Clients is the number of concurrent clients (keep-alive
	// connections). Default 64.
	Clients int
	// UpstreamLatencies are the service times of the upstream, each
	// compared in a section of its own: how long the upstream takes per
	// request (the write a key protects: a database transaction, a
	// payment call), 0 for an upstream that does no work at all. Default
	// 5ms and 0.
	UpstreamLatencies []time.Duration
	// UpstreamWorkers is how many requests the upstream serves at a
	// time, the others waiting their turn: the shape of an API whose
	// throughput its workers bound (gunicorn or puma workers, a database
	// pool). 0: as many as come, so that the clients' concurrency and each
	// request's latency set the rate.
	UpstreamWorkers int
	// Rounds is how many times every target is measured per section, the
	// targets taking turns in a rotating order; rates are the median
	// round's. Default 3.
	Rounds int
	// BodySize is the size of the upstream's response body, in bytes.
	// Default 256.
	BodySize int
	// DedupBin is the dedup binary; "" builds it with `go build` (run
	// inside the module).
	DedupBin string
	// Dir is the parent of the temporary state directories. Default the
	// system's temporary directory.
	Dir string
	// TargetCmd, if set, is the command line of a process that serves
	// one target of its own, named by the flags it gets added: dedupbench's
	// hidden idem-target subcommand ([ServeIdemMemory],
	// [ServeIdemConstant]). Two targets run that way: the same middleware
	// as the Redis build on a Go map, the pattern with no durability and
	// no store to ask; and net/http answering every request with a
	// constant replay, the floor of any replay on net/http. Nil: neither
	// is measured.
	TargetCmd []string
	// SharedProxies lists the sizes of the shared deployments measured:
	// for each n, n `dedup proxy --store` on one `dedup serve`, the
	// clients spread over the proxies. Nil: none.
	SharedProxies []int
}

// EnsureDefaults fills the zero fields of c with their defaults: the
// one place they are defined (dedupbench takes its flags' defaults
// from it).
func (c *IdemConfig) EnsureDefaults() {
	if c.Requests == 0 {
		c.Requests = 5_000
	}
	if c.Replays == 0 {
		c.Replays = 20_000
	}
	if c.Clients == 0 {
		c.Clients = 64
	}
	if c.UpstreamLatencies == nil {
		c.UpstreamLatencies = []time.Duration{5 * time.Millisecond, 0}
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if c.BodySize == 0 {
		c.BodySize = 256
	}
}

// IdemRow is one target's measurements at one upstream latency.
type IdemRow struct {
	Target string `json:"target"`
	// UpstreamLatency is the upstream's service time in this section.
	UpstreamLatency time.Duration `json:"upstream_latency_ns"`
	NewPerSec       float64       `json:"new_per_sec"`
	// NewP50 and NewP99 are the median and 99th percentile latency of
	// the requests with new keys, over every round.
	NewP50        time.Duration `json:"new_p50_ns"`
	NewP99        time.Duration `json:"new_p99_ns"`
	ReplayPerSec  float64       `json:"replay_per_sec"`
	ReplayP99     time.Duration `json:"replay_p99_ns"`
	UpstreamCalls int64         `json:"upstream_calls"`
	// NewCPU and ReplayCPU are the CPU time (user and system) per
	// request of the process that keeps the keys (dedup proxy,
	// redis-server); 0 for the upstream called directly.
	NewCPU    time.Duration `json:"new_cpu_ns"`
	ReplayCPU time.Duration `json:"replay_cpu_ns"`
	// BenchNewCPU and BenchReplayCPU are the CPU time per request of the
	// benchmark's own process: the clients and the upstream, and for the
	// Redis build its Go middleware too.
	BenchNewCPU    time.Duration `json:"bench_new_cpu_ns"`
	BenchReplayCPU time.Duration `json:"bench_replay_cpu_ns"`
	// RSSPerResult is the growth of the resident memory of the process
	// that keeps the results (dedup proxy, redis-server) over the new-key
	// runs, per stored result.
	RSSPerResult float64 `json:"rss_per_result"`
	// DiskPerResult is the growth of the state directory, per result.
	DiskPerResult float64 `json:"disk_per_result"`
}

// IdemResult is the comparison.
type IdemResult struct {
	Config IdemConfig `json:"config"`
	Rows   []IdemRow  `json:"rows"`
	// Machine says where and when the comparison was made.
	Machine *Machine `json:"machine,omitempty"`
}

// idemTarget is one way to reach the upstream.
type idemTarget struct {
	name string
	url  string
	pool *idemPool
	warm bool
	// replayOnly targets answer every request as a replay and get only
	// the replays.
	replayOnly bool
	// memory, if set, returns the bytes (resident, on disk) the results
	// take; cpu, if set, the CPU time of the process that keeps them.
	memory func() (rss, disk uint64, err error)
	cpu    func() (time.Duration, error)
	// diag, if set, explains a failed request: the target's process
	// exited, and how ("" if it runs).
	diag func() string
}

// failed wraps err, a failure of t during stage, with t's diagnosis.
func (t *idemTarget) failed(stage string, err error) error {
	if t.diag != nil {
		if d := t.diag(); d != "" {
			return fmt.Errorf("bench: %s: %s: %w\n%s", t.name, stage, err, d)
		}
	}
	return fmt.Errorf("bench: %s: %s: %w", t.name, stage, err)
}

// Idem runs the comparison: for each upstream latency, Rounds rounds in
// which every target, in turn, gets Requests requests with new keys, then
// Replays requests repeating them.
func Idem(ctx context.Context, cfg IdemConfig, p Progress) (*IdemResult, error) {
	cfg.EnsureDefaults()
	if p == nil {
		p = nopProgress{}
	}
	up, err := startUpstream(cfg)
	if err != nil {
		return nil, err
	}
	defer up.close()
	bin := cfg.DedupBin
	if bin == "" {
		dir, err := os.MkdirTemp(cfg.Dir, "dedupbench-bin-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "dedup")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/streamdedup/dedup/cmd/dedup").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("bench: go build dedup: %v\n%s", err, out)
		}
	}
	res := &IdemResult{Config: cfg, Machine: StartMachine()}
	defer res.Machine.End()

	targets := []*idemTarget{{name: "upstream directly", url: up.url}}
	proxy, stopProxy, err := startDedupProxy(ctx, cfg, bin, up)
	if err != nil {
		return nil, err
	}
	defer stopProxy()
	targets = append(targets, proxy)
	for _, n := range cfg.SharedProxies {
		st, stopShared, err := startSharedProxies(ctx, cfg, bin, up, n)
		if err != nil {
			return nil, err
		}
		defer stopShared()
		targets = append(targets, st)
	}
	for _, durable := range []bool{false, true} {
		rt, stopRedis, err := startRedisMiddleware(ctx, cfg, up, durable)
		if errors.Is(err, ErrNoRedis) {
			break
		}
		if err != nil {
			return nil, err
		}
		defer stopRedis()
		targets = append(targets, rt)
	}
	if len(cfg.TargetCmd) > 0 {
		mt, stopMem, err := startOwnTarget(ctx, cfg, memoryTarget, "--kind", "memory", "--upstream", up.url)
		if err != nil {
			return nil, err
		}
		defer stopMem()
		ct, stopConst, err := startOwnTarget(ctx, cfg, constantTarget, "--kind", "constant", "--body", fmt.Sprint(cfg.BodySize))
		if err != nil {
			return nil, err
		}
		defer stopConst()
		ct.replayOnly = true
		targets = append(targets, mt, ct)
	}
	for _, t := range targets {
		if t.pool, err = newIdemPool(t.url, cfg.Clients); err != nil {
			return nil, err
		}
		defer t.pool.close()
	}
	for _, latency := range cfg.UpstreamLatencies {
		up.latency.Store(int64(latency))
		rows := make([]idemAcc, len(targets))
		for r := 0; r < cfg.Rounds; r++ {
			for k := range targets {
				i := (k + r) % len(targets)
				t := targets[i]
				p.Stage(fmt.Sprintf("upstream %v, round %d/%d: %s", latency, r+1, cfg.Rounds, t.name), int64(cfg.Requests+cfg.Replays))
				if err := rows[i].run(ctx, cfg, t, up, p, fmt.Sprintf("%v-r%d-", latency, r)); err != nil {
					return nil, err
				}
			}
		}
		for i, t := range targets {
			res.Rows = append(res.Rows, rows[i].row(cfg, t.name, latency))
		}
	}
	return res, nil
}

// upstream is the API behind every target.
type upstream struct {
	srv     *http.Server
	url     string
	calls   atomic.Int64
	latency atomic.Int64 // service time, ns
}

func startUpstream(cfg IdemConfig) (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: upstream: %w", err)
	}
	u := &upstream{url: "http://" + ln.Addr().String()}
	pad := chargePad(cfg.BodySize)
	var workers chan struct{}
	if cfg.UpstreamWorkers > 0 {
		workers = make(chan struct{}, cfg.UpstreamWorkers)
	}
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if workers != nil {
			workers <- struct{}{}
			defer func() { <-workers }()
		}
		u.calls.Add(1)
		io.Copy(io.Discard, r.Body)
		if d := time.Duration(u.latency.Load()); d > 0 {
			time.Sleep(d)
		}
		writeCharge(w, r, pad)
	})}
	go u.srv.Serve(ln)
	return u, nil
}

func (u *upstream) close() { u.srv.Close() }

// chargePad is the padding that makes a charge's JSON body size bytes.
func chargePad(size int) string { return strings.Repeat("x", max(0, size-64)) }

// writeCharge answers r as the upstream does: 201, the charge as JSON
// padded with pad, its Location.
func writeCharge(w http.ResponseWriter, r *http.Request, pad string) {
	key := r.Header.Get("Idempotency-Key")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/"+key)
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%q,"status":"succeeded","pad":%q}`, key, pad)
}

// idemAcc accumulates one target's rounds at one upstream latency.
type idemAcc struct {
	newRates, replayRates []float64
	newHist, replayHist   Histogram
	calls                 int64
	newCPU, replayCPU     time.Duration
	benchNew, benchReplay time.Duration
	rss, disk             uint64
	newN, replayN         int
}

// run drives t for one round: new keys (prefix), then replays of them in a
// scattered order.
func (a *idemAcc) run(ctx context.Context, cfg IdemConfig, t *idemTarget, up *upstream, p Progress, prefix string) error {
	if !t.warm {
		// Warm the connections up on keys of their own.
		var h Histogram
		if _, err := idemLoad(ctx, t.pool, "warm-", cfg.Clients*4, func(i int) int { return i }, nil, false, &h); err != nil {
			return t.failed("warm-up", err)
		}
		t.warm = true
	}
	var rss0, disk0 uint64
	if t.memory != nil {
		var err error
		if rss0, disk0, err = t.memory(); err != nil {
			return err
		}
	}
	calls0 := up.calls.Load()
	cpu := func() (time.Duration, time.Duration, error) {
		var c time.Duration
		if t.cpu != nil {
			var err error
			if c, err = t.cpu(); err != nil {
				return 0, 0, err
			}
		}
		return c, cputime.Process(), nil
	}
	// load sends n requests, the i-th with key keyOf(i), and returns their
	// rate and the CPU they cost the target and the benchmark's process.
	load := func(stage string, n int, keyOf func(int) int, replayed bool, h *Histogram) (rate float64, target, bench time.Duration, err error) {
		c0, b0, err := cpu()
		if err != nil {
			return 0, 0, 0, err
		}
		if rate, err = idemLoad(ctx, t.pool, prefix, n, keyOf, p, replayed, h); err != nil {
			return 0, 0, 0, t.failed(stage, err)
		}
		c1, b1, err := cpu()
		return rate, c1 - c0, b1 - b0, err
	}
	if t.replayOnly {
		p.Add(int64(cfg.Requests))
	} else {
		rate, c, b, err := load("new keys", cfg.Requests, func(i int) int { return i }, false, &a.newHist)
		if err != nil {
			return err
		}
		a.newRates = append(a.newRates, rate)
		a.newCPU += c
		a.benchNew += b
		a.newN += cfg.Requests
		if t.memory != nil {
			rss1, disk1, err := t.memory()
			if err != nil {
				return err
			}
			a.rss += max(rss1, rss0) - rss0
			a.disk += max(disk1, disk0) - disk0
		}
	}
	stride := 7919
	for gcd(stride, cfg.Requests) != 1 {
		stride += 2
	}
	rate, c, b, err := load("replays", cfg.Replays, func(i int) int { return (i * stride) % cfg.Requests }, t.name != "upstream directly", &a.replayHist)
	if err != nil {
		return err
	}
	a.replayRates = append(a.replayRates, rate)
	a.replayCPU += c
	a.benchReplay += b
	a.replayN += cfg.Replays
	a.calls += up.calls.Load() - calls0
	return nil
}

// row is the target's row: the median round's rates, the p99 of all
// rounds' requests, CPU, memory and disk per request or result over all.
func (a *idemAcc) row(cfg IdemConfig, name string, latency time.Duration) IdemRow {
	per := func(d time.Duration, n int) time.Duration {
		if n == 0 {
			return 0
		}
		return d / time.Duration(n)
	}
	return IdemRow{
		Target: name, UpstreamLatency: latency,
		NewPerSec: median(a.newRates), NewP50: a.newHist.Quantile(0.5), NewP99: a.newHist.Quantile(0.99),
		ReplayPerSec: median(a.replayRates), ReplayP99: a.replayHist.Quantile(0.99),
		UpstreamCalls: a.calls / int64(cfg.Rounds),
		NewCPU:        per(a.newCPU, a.newN), ReplayCPU: per(a.replayCPU, a.replayN),
		BenchNewCPU: per(a.benchNew, a.newN), BenchReplayCPU: per(a.benchReplay, a.replayN),
		RSSPerResult:  float64(a.rss) / float64(max(a.newN, 1)),
		DiskPerResult: float64(a.disk) / float64(max(a.newN, 1)),
	}
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
