package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup/internal/cputime"
	"github.com/streamdedup/dedup/internal/diskuse"
	"github.com/streamdedup/dedup/internal/humanize"
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
}

func (c *IdemConfig) defaults() {
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
	NewP99          time.Duration `json:"new_p99_ns"`
	ReplayPerSec    float64       `json:"replay_per_sec"`
	ReplayP99       time.Duration `json:"replay_p99_ns"`
	UpstreamCalls   int64         `json:"upstream_calls"`
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
	name   string
	url    string
	client *http.Client
	warm   bool
	// memory, if set, returns the bytes (resident, on disk) the results
	// take; cpu, if set, the CPU time of the process that keeps them.
	memory func() (rss, disk uint64, err error)
	cpu    func() (time.Duration, error)
}

// Idem runs the comparison: for each upstream latency, Rounds rounds in
// which every target, in turn, gets Requests requests with new keys, then
// Replays requests repeating them.
func Idem(ctx context.Context, cfg IdemConfig, p Progress) (*IdemResult, error) {
	cfg.defaults()
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
	rt, stopRedis, err := startRedisMiddleware(ctx, cfg, up)
	switch {
	case errors.Is(err, ErrNoRedis):
	case err != nil:
		return nil, err
	default:
		defer stopRedis()
		targets = append(targets, rt)
	}
	for _, t := range targets {
		t.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients, MaxConnsPerHost: cfg.Clients, DisableCompression: true}}
		defer t.client.CloseIdleConnections()
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
	pad := strings.Repeat("x", max(0, cfg.BodySize-64))
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		io.Copy(io.Discard, r.Body)
		if d := time.Duration(u.latency.Load()); d > 0 {
			time.Sleep(d)
		}
		key := r.Header.Get("Idempotency-Key")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/charges/"+key)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"status":"succeeded","pad":%q}`, key, pad)
	})}
	go u.srv.Serve(ln)
	return u, nil
}

func (u *upstream) close() { u.srv.Close() }

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
		if _, err := idemLoad(ctx, t.client, t.url, "warm-", cfg.Clients*4, cfg.Clients, func(i int) int { return i }, nil, false, &h); err != nil {
			return fmt.Errorf("bench: %s: warm-up: %w", t.name, err)
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
	c0, b0, err := cpu()
	if err != nil {
		return err
	}
	rate, err := idemLoad(ctx, t.client, t.url, prefix, cfg.Requests, cfg.Clients, func(i int) int { return i }, p, false, &a.newHist)
	if err != nil {
		return fmt.Errorf("bench: %s: new keys: %w", t.name, err)
	}
	c1, b1, err := cpu()
	if err != nil {
		return err
	}
	a.newRates = append(a.newRates, rate)
	a.newCPU += c1 - c0
	a.benchNew += b1 - b0
	a.newN += cfg.Requests
	if t.memory != nil {
		rss1, disk1, err := t.memory()
		if err != nil {
			return err
		}
		a.rss += max(rss1, rss0) - rss0
		a.disk += max(disk1, disk0) - disk0
	}
	stride := 7919
	for gcd(stride, cfg.Requests) != 1 {
		stride += 2
	}
	c1, b1, err = cpu()
	if err != nil {
		return err
	}
	rate, err = idemLoad(ctx, t.client, t.url, prefix, cfg.Replays, cfg.Clients, func(i int) int { return (i * stride) % cfg.Requests }, p, t.name != "upstream directly", &a.replayHist)
	if err != nil {
		return fmt.Errorf("bench: %s: replays: %w", t.name, err)
	}
	c2, b2, err := cpu()
	if err != nil {
		return err
	}
	a.replayRates = append(a.replayRates, rate)
	a.replayCPU += c2 - c1
	a.benchReplay += b2 - b1
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
		NewPerSec: median(a.newRates), NewP99: a.newHist.Quantile(0.99),
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

// idemLoad sends n POSTs from clients goroutines, request i with key
// prefix+keyOf(i), records each latency in h and returns requests per
// second. Every response must be 201; with replayed, also marked replayed.
func idemLoad(ctx context.Context, client *http.Client, url, prefix string, n, clients int, keyOf func(int) int, p Progress, replayed bool, h *Histogram) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	hists := make([]Histogram, clients)
	errs := make([]error, clients)
	body := []byte(`{"amount":1000,"currency":"eur","source":"tok_visa"}`)
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := 0
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", url+"/charges", bytes.NewReader(body))
				req.Header.Set("Idempotency-Key", prefix+strconv.Itoa(keyOf(i)))
				req.Header.Set("Content-Type", "application/json")
				t := time.Now()
				res, err := client.Do(req)
				if err != nil {
					errs[c] = err
					return
				}
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				hists[c].Record(time.Since(t))
				if err != nil {
					errs[c] = err
					return
				}
				if res.StatusCode != http.StatusCreated || (replayed && res.Header.Get("Idempotent-Replayed") != "true") {
					errs[c] = fmt.Errorf("status %d, replayed %q", res.StatusCode, res.Header.Get("Idempotent-Replayed"))
					return
				}
				if done++; p != nil && done%64 == 0 {
					p.Add(64)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	for i := range hists {
		h.Merge(&hists[i])
	}
	return float64(n) / el.Seconds(), nil
}

// startDedupProxy runs `dedup proxy` as a child process in front of up.
func startDedupProxy(ctx context.Context, cfg IdemConfig, bin string, up *upstream) (*idemTarget, func(), error) {
	state, err := os.MkdirTemp(cfg.Dir, "dedupbench-proxy-")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	cmd := exec.CommandContext(ctx, bin, "proxy", "--listen", "127.0.0.1:0", "--upstream", up.url, "--state", state,
		"--window", "24h", "--lease", "30s")
	stop := func() {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		os.RemoveAll(state)
	}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	if err := cmd.Start(); err != nil {
		stop()
		return nil, nil, fmt.Errorf("bench: start dedup proxy: %w", err)
	}
	r := bufio.NewReader(pipe)
	addr := ""
	for addr == "" {
		line, err := r.ReadString('\n')
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("bench: dedup proxy did not start: %v (%s)", err, line)
		}
		if _, rest, ok := strings.Cut(line, "listening on "); ok {
			addr, _, _ = strings.Cut(rest, " ")
		}
	}
	go io.Copy(io.Discard, r)
	pid := cmd.Process.Pid
	t := &idemTarget{name: "dedup proxy", url: "http://" + addr,
		memory: func() (uint64, uint64, error) {
			rss, err := procRSS(pid)
			if err != nil {
				return 0, 0, err
			}
			disk, err := diskuse.Bytes(vfs.Default, state)
			if err != nil {
				return 0, 0, fmt.Errorf("bench: du %s: %w", state, err)
			}
			return rss, disk, nil
		},
		cpu: func() (time.Duration, error) { return procCPU(pid) },
	}
	return t, stop, nil
}

// procCPU reads the CPU time (user and system) a process has used from
// /proc.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: CPU time: %w", err)
	}
	// The fields after the command name (which may hold spaces), from
	// field 3: utime and stime are fields 14 and 15, in clock ticks.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("bench: CPU time: unreadable /proc/%d/stat", pid)
	}
	var ticks uint64
	for _, x := range f[11:13] {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: CPU time: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ), 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procRSS reads a process's resident set size from /proc.
func procRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: RSS: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("bench: no VmRSS in /proc status")
}

// startRedisMiddleware runs the usual Redis build of the pattern in front
// of up: a Go reverse proxy (in this process) that takes the key with SET
// NX PX (the lock, holding the request's fingerprint), stores the response
// with SET PX (the TTL) once the upstream answers, answers a repeat from
// GET, and deletes the key when the upstream fails. redis-server runs
// without persistence.
func startRedisMiddleware(ctx context.Context, cfg IdemConfig, up *upstream) (*idemTarget, func(), error) {
	rs, err := StartRedis(ctx)
	if err != nil {
		return nil, nil, err
	}
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: cfg.Clients * 2})
	target, err := url.Parse(up.url)
	if err != nil {
		return nil, nil, errors.Join(err, rc.Close(), rs.Stop())
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024 // as dedup proxy keeps them
	rp.Transport = tr
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("bench: %w", err), rc.Close(), rs.Stop())
	}
	srv := &http.Server{Handler: redisIdempotency(rc, rp, 30*time.Second, 24*time.Hour)}
	go srv.Serve(ln)
	pid := rs.cmd.Process.Pid
	t := &idemTarget{name: "redis middleware", url: "http://" + ln.Addr().String(),
		memory: func() (uint64, uint64, error) {
			_, rss, err := infoMemory(ctx, rc)
			return rss, 0, err
		},
		cpu: func() (time.Duration, error) { return procCPU(pid) },
	}
	return t, func() { srv.Close(); rc.Close(); rs.Stop() }, nil
}

// redisResponse is a response as the Redis build stores it.
type redisResponse struct {
	Fingerprint string      `json:"fp"`
	Status      int         `json:"status"`
	Header      http.Header `json:"header"`
	Body        []byte      `json:"body"`
}

// redisIdempotency is the common middleware on Redis, as services write
// it: lock, run, store or delete.
func redisIdempotency(rc *redis.Client, next http.Handler, lease, ttl time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		fp := fmt.Sprintf("%x", sha256.Sum256([]byte(r.Method+"\x00"+r.URL.RequestURI()+"\x00"+string(body))))
		ctx := r.Context()
		rk := "idem:" + key
		ok, err := rc.SetNX(ctx, rk, "lock:"+fp, lease).Result()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !ok {
			v, err := rc.Get(ctx, rk).Bytes()
			if err != nil || bytes.HasPrefix(v, []byte("lock:")) {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "in progress", http.StatusConflict)
				return
			}
			var s redisResponse
			if err := json.Unmarshal(v, &s); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if s.Fingerprint != fp {
				http.Error(w, "key reused", http.StatusUnprocessableEntity)
				return
			}
			for k, vs := range s.Header {
				w.Header()[k] = vs
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(s.Status)
			w.Write(s.Body)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &redisRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		if rec.status >= 500 || rec.status == http.StatusTooManyRequests {
			rc.Del(context.WithoutCancel(ctx), rk)
			return
		}
		h := w.Header().Clone()
		h.Del("Date")
		v, _ := json.Marshal(redisResponse{Fingerprint: fp, Status: rec.status, Header: h, Body: rec.body.Bytes()})
		rc.Set(context.WithoutCancel(ctx), rk, v, ttl)
	})
}

type redisRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *redisRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *redisRecorder) Write(p []byte) (int, error) {
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

// WriteText writes the comparison tables, one per upstream latency.
func (r *IdemResult) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "idempotency keys: %d new keys then %d replays per target and round, %d rounds (targets in turn), %d clients, %d-byte responses\n",
		r.Config.Requests, r.Config.Replays, r.Config.Rounds, r.Config.Clients, r.Config.BodySize)
	if r.Machine != nil {
		fmt.Fprintln(w, r.Machine.String())
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	us := func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
	for _, latency := range r.Config.UpstreamLatencies {
		section := r.section(latency)
		var direct, redisRow *IdemRow
		for i := range section {
			switch section[i].Target {
			case "upstream directly":
				direct = &section[i]
			case "redis middleware":
				redisRow = &section[i]
			}
		}
		fmt.Fprintf(w, "\nupstream service time %v:\n\n", latency)
		var rows [][]string
		for _, x := range section {
			vsDirect, vsRedis, replayVsRedis := "-", "-", "-"
			if direct != nil {
				vsDirect = ratio(x.NewPerSec, direct.NewPerSec)
			}
			if redisRow != nil {
				vsRedis = ratio(x.NewPerSec, redisRow.NewPerSec)
				if x.Target != "upstream directly" {
					replayVsRedis = ratio(x.ReplayPerSec, redisRow.ReplayPerSec)
				}
			}
			mem, disk := "-", "-"
			if x.RSSPerResult > 0 {
				mem = fmt.Sprintf("%.0f B", x.RSSPerResult)
			}
			if x.DiskPerResult > 0 {
				disk = fmt.Sprintf("%.0f B", x.DiskPerResult)
			}
			rows = append(rows, []string{x.Target, humanize.Count(x.NewPerSec), vsDirect, vsRedis, lat(x.NewP99),
				humanize.Count(x.ReplayPerSec), replayVsRedis, lat(x.ReplayP99), strconv.FormatInt(x.UpstreamCalls, 10),
				us(x.NewCPU) + " / " + us(x.ReplayCPU), us(x.BenchNewCPU) + " / " + us(x.BenchReplayCPU), mem, disk})
		}
		if err := table(w, "target\tnew/s\tvs direct\tvs redis\tp99 new\treplays/s\tvs redis\tp99 replay\tupstream calls\tCPU/req new / replay\tbench CPU/req new / replay\tRSS/result\tdisk/result", rows); err != nil {
			return err
		}
	}
	return nil
}

// section returns the rows measured with the upstream taking latency.
func (r *IdemResult) section(latency time.Duration) []IdemRow {
	var rows []IdemRow
	for _, x := range r.Rows {
		if x.UpstreamLatency == latency {
			rows = append(rows, x)
		}
	}
	return rows
}
