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
	"github.com/streamdedup/dedup/internal/diskuse"
	"github.com/streamdedup/dedup/internal/humanize"
)

// IdemConfig configures the idempotency-key comparison: one upstream API,
// called directly, through `dedup proxy`, and through the usual Redis
// build of the pattern (a reverse proxy in Go taking a SET NX PX lock and
// storing the response in Redis), by the same closed-loop HTTP clients.
type IdemConfig struct {
	// Requests is the number of requests with new keys per target.
	// Default 20,000.
	Requests int
	// Replays is the number of requests repeating stored keys per target.
	// Default 100,000.
	Replays int
	// Clients is the number of concurrent clients (keep-alive
	// connections). Default 64.
	Clients int
	// UpstreamLatency is how long the upstream takes per request: the
	// write the key protects (a database transaction, a payment call).
	// Default 20ms.
	UpstreamLatency time.Duration
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
		c.Requests = 20_000
	}
	if c.Replays == 0 {
		c.Replays = 100_000
	}
	if c.Clients == 0 {
		c.Clients = 64
	}
	if c.UpstreamLatency == 0 {
		c.UpstreamLatency = 20 * time.Millisecond
	}
	if c.BodySize == 0 {
		c.BodySize = 256
	}
}

// IdemRow is one target's measurements.
type IdemRow struct {
	Target        string        `json:"target"`
	NewPerSec     float64       `json:"new_per_sec"`
	NewP99        time.Duration `json:"new_p99_ns"`
	ReplayPerSec  float64       `json:"replay_per_sec"`
	ReplayP99     time.Duration `json:"replay_p99_ns"`
	UpstreamCalls int64         `json:"upstream_calls"`
	// RSSPerResult is the growth of the resident memory of the process
	// that keeps the results (dedup proxy, redis-server) over the new-key
	// run, per stored result.
	RSSPerResult float64 `json:"rss_per_result"`
	// DiskPerResult is the growth of the state directory, per result.
	DiskPerResult float64 `json:"disk_per_result"`
}

// IdemResult is the comparison.
type IdemResult struct {
	Config IdemConfig `json:"config"`
	Rows   []IdemRow  `json:"rows"`
}

// Idem runs the comparison: for each target, Requests requests with new
// keys, then Replays requests repeating them.
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
	res := &IdemResult{Config: cfg}

	p.Stage("upstream directly", int64(cfg.Requests+cfg.Replays))
	row, err := idemRun(ctx, cfg, "upstream directly", up.url, up, p, nil)
	if err != nil {
		return nil, err
	}
	res.Rows = append(res.Rows, row)

	p.Stage("dedup proxy", int64(cfg.Requests+cfg.Replays))
	row, err = idemDedup(ctx, cfg, bin, up, p)
	if err != nil {
		return nil, err
	}
	res.Rows = append(res.Rows, row)

	p.Stage("redis middleware", int64(cfg.Requests+cfg.Replays))
	row, err = idemRedis(ctx, cfg, up, p)
	if errors.Is(err, ErrNoRedis) {
		return res, nil
	}
	if err != nil {
		return nil, err
	}
	res.Rows = append(res.Rows, row)
	return res, nil
}

// upstream is the API behind every target.
type upstream struct {
	srv   *http.Server
	url   string
	calls atomic.Int64
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
		time.Sleep(cfg.UpstreamLatency)
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

// idemRun drives target at url: new keys, then replays of them. memory,
// if set, is called before and after the new keys and returns the bytes
// (resident, on disk) the results take.
func idemRun(ctx context.Context, cfg IdemConfig, name, url string, up *upstream, p Progress, memory func() (rss, disk uint64, err error)) (IdemRow, error) {
	row := IdemRow{Target: name}
	prefix := fmt.Sprintf("%s-%d-", strings.ReplaceAll(name, " ", "-"), time.Now().UnixNano())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients, MaxConnsPerHost: cfg.Clients, DisableCompression: true}}
	defer client.CloseIdleConnections()
	// Warm the connections up on keys of their own.
	if _, _, err := idemLoad(ctx, client, url, prefix+"warm-", cfg.Clients*4, cfg.Clients, func(i int) int { return i }, nil, false); err != nil {
		return row, fmt.Errorf("bench: %s: warm-up: %w", name, err)
	}
	var rss0, disk0 uint64
	if memory != nil {
		var err error
		if rss0, disk0, err = memory(); err != nil {
			return row, err
		}
	}
	calls0 := up.calls.Load()
	rate, p99, err := idemLoad(ctx, client, url, prefix, cfg.Requests, cfg.Clients, func(i int) int { return i }, p, false)
	if err != nil {
		return row, fmt.Errorf("bench: %s: new keys: %w", name, err)
	}
	row.NewPerSec, row.NewP99 = rate, p99
	if memory != nil {
		rss1, disk1, err := memory()
		if err != nil {
			return row, err
		}
		row.RSSPerResult = float64(max(rss1, rss0)-rss0) / float64(cfg.Requests)
		row.DiskPerResult = float64(max(disk1, disk0)-disk0) / float64(cfg.Requests)
	}
	// Replays in a scattered order (a stride prime to Requests).
	stride := 7919
	for gcd(stride, cfg.Requests) != 1 {
		stride += 2
	}
	rate, p99, err = idemLoad(ctx, client, url, prefix, cfg.Replays, cfg.Clients, func(i int) int { return (i * stride) % cfg.Requests }, p, memory != nil)
	if err != nil {
		return row, fmt.Errorf("bench: %s: replays: %w", name, err)
	}
	row.ReplayPerSec, row.ReplayP99 = rate, p99
	row.UpstreamCalls = up.calls.Load() - calls0
	return row, nil
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// idemLoad sends n POSTs from clients goroutines, request i with key
// prefix+keyOf(i), and returns requests per second and the p99 latency.
// Every response must be 201; with replayed, also marked replayed.
func idemLoad(ctx context.Context, client *http.Client, url, prefix string, n, clients int, keyOf func(int) int, p Progress, replayed bool) (float64, time.Duration, error) {
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
		return 0, 0, err
	}
	if ctx.Err() != nil {
		return 0, 0, ctx.Err()
	}
	var h Histogram
	for i := range hists {
		h.Merge(&hists[i])
	}
	return float64(n) / el.Seconds(), h.Quantile(0.99), nil
}

// idemDedup runs `dedup proxy` as a child process in front of up.
func idemDedup(ctx context.Context, cfg IdemConfig, bin string, up *upstream, p Progress) (IdemRow, error) {
	state, err := os.MkdirTemp(cfg.Dir, "dedupbench-proxy-")
	if err != nil {
		return IdemRow{}, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(state)
	cmd := exec.CommandContext(ctx, bin, "proxy", "--listen", "127.0.0.1:0", "--upstream", up.url, "--state", state,
		"--window", "24h", "--lease", "30s")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return IdemRow{}, fmt.Errorf("bench: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return IdemRow{}, fmt.Errorf("bench: start dedup proxy: %w", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	r := bufio.NewReader(pipe)
	addr := ""
	for addr == "" {
		line, err := r.ReadString('\n')
		if err != nil {
			return IdemRow{}, fmt.Errorf("bench: dedup proxy did not start: %v (%s)", err, line)
		}
		if _, rest, ok := strings.Cut(line, "listening on "); ok {
			addr, _, _ = strings.Cut(rest, " ")
		}
	}
	go io.Copy(io.Discard, r)
	memory := func() (uint64, uint64, error) {
		rss, err := procRSS(cmd.Process.Pid)
		if err != nil {
			return 0, 0, err
		}
		disk, err := diskuse.Bytes(vfs.Default, state)
		if err != nil {
			return 0, 0, fmt.Errorf("bench: du %s: %w", state, err)
		}
		return rss, disk, nil
	}
	return idemRun(ctx, cfg, "dedup proxy", "http://"+addr, up, p, memory)
}

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

// idemRedis runs the usual Redis build of the pattern in front of up: a
// Go reverse proxy that takes the key with SET NX PX (the lock, holding
// the request's fingerprint), stores the response with SET PX (the TTL)
// once the upstream answers, answers a repeat from GET, and deletes the
// key when the upstream fails. redis-server runs without persistence.
func idemRedis(ctx context.Context, cfg IdemConfig, up *upstream, p Progress) (IdemRow, error) {
	rs, err := StartRedis(ctx)
	if err != nil {
		return IdemRow{}, err
	}
	defer rs.Stop()
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: cfg.Clients * 2})
	defer rc.Close()
	target, err := url.Parse(up.url)
	if err != nil {
		return IdemRow{}, err
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024 // as dedup proxy keeps them
	rp.Transport = tr
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return IdemRow{}, fmt.Errorf("bench: %w", err)
	}
	srv := &http.Server{Handler: redisIdempotency(rc, rp, 30*time.Second, 24*time.Hour)}
	go srv.Serve(ln)
	defer srv.Close()
	memory := func() (uint64, uint64, error) {
		_, rss, err := infoMemory(ctx, rc)
		return rss, 0, err
	}
	return idemRun(ctx, cfg, "redis middleware", "http://"+ln.Addr().String(), up, p, memory)
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

// WriteText writes the comparison table.
func (r *IdemResult) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "idempotency keys: %d new keys then %d replays per target, %d clients, upstream %v per request, %d-byte responses\n\n",
		r.Config.Requests, r.Config.Replays, r.Config.Clients, r.Config.UpstreamLatency, r.Config.BodySize)
	var direct, redisRow *IdemRow
	for i := range r.Rows {
		switch r.Rows[i].Target {
		case "upstream directly":
			direct = &r.Rows[i]
		case "redis middleware":
			redisRow = &r.Rows[i]
		}
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	var rows [][]string
	for _, x := range r.Rows {
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
			humanize.Count(x.ReplayPerSec), replayVsRedis, lat(x.ReplayP99), strconv.FormatInt(x.UpstreamCalls, 10), mem, disk})
	}
	return table(w, "target\tnew/s\tvs direct\tvs redis\tp99 new\treplays/s\tvs redis\tp99 replay\tupstream calls\tRSS/result\tdisk/result", rows)
}
