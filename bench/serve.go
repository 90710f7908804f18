package bench

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/internal/humanize"
	"github.com/streamdedup/dedup/resp"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// ServeConfig configures the drop-in comparison: redis-benchmark driving
// `SET key:__rand_int__ 1 NX EX ttl` against a real redis-server and
// against dedup's RESP server (package resp), one after the other on the
// same machine, then BF.MADD batches against dedup.
type ServeConfig struct {
	// Requests is redis-benchmark's -n for SET NX. Default 2,000,000.
	Requests int
	// Clients is -c. Default 8.
	Clients int
	// Pipeline is -P. Default 16.
	Pipeline int
	// KeySpace is -r: keys are key:0 .. key:KeySpace-1. Default 10,000,000.
	KeySpace int
	// KeySpaces, if set, replaces KeySpace and Requests: one run of every
	// target per key space K, with -r K and -n 3K (95% of the K keys
	// arrive), so that the memory tables have a row per size (the BF.MADD
	// run is made at the first). Default none.
	KeySpaces []int `json:",omitempty"`
	// TTL is the EX of every SET, in seconds; dedup's window is TTL.
	// Default 3600.
	TTL int
	// Modes are the dedup modes to run: "exact", "probabilistic". Default
	// both.
	Modes []string
	// Fsync is dedup's durability mode. Default "everysec".
	Fsync string
	// FalsePositiveRate is dedup's filter target. Default 0.01.
	FalsePositiveRate float64
	// MaddItems is the items per BF.MADD call. Default 100; 0 with
	// MaddRequests < 0 skips the BF.MADD run.
	MaddItems int
	// MaddRequests is redis-benchmark's -n for BF.MADD. Default 100,000;
	// negative skips the run.
	MaddRequests int
	// Rounds repeats the whole sequence (redis, then each dedup mode) on
	// fresh servers; each row is the round with the median ops/s, so that
	// a machine loaded by other work disturbs the ratios less. Default 1.
	Rounds int
	// Dir is the parent of the temporary state directories. Default the
	// system's temporary directory.
	Dir string
	// ClusterNodes, at least 2, selects [ServeCluster]: one dedup node,
	// ClusterNodes dedup nodes and a Redis Cluster of ClusterNodes
	// redis-server nodes. Default 0: the single-server comparison.
	ClusterNodes int `json:",omitempty"`
	// DedupBin is the dedup binary ServeCluster runs; "" builds it with
	// `go build` (run from the module).
	DedupBin string `json:",omitempty"`
}

// EnsureDefaults fills the zero fields of c with their defaults: the
// one place they are defined (dedupbench takes its flags' defaults
// from it).
func (c *ServeConfig) EnsureDefaults() {
	c.Requests = cmp.Or(c.Requests, 2_000_000)
	c.Clients = cmp.Or(c.Clients, 8)
	c.Pipeline = cmp.Or(c.Pipeline, 16)
	c.KeySpace = cmp.Or(c.KeySpace, 10_000_000)
	c.TTL = cmp.Or(c.TTL, 3600)
	if c.Modes == nil {
		c.Modes = []string{"exact", "probabilistic"}
	}
	c.Fsync = cmp.Or(c.Fsync, resp.FsyncEverySec)
	c.FalsePositiveRate = cmp.Or(c.FalsePositiveRate, 0.01)
	c.MaddItems = cmp.Or(c.MaddItems, 100)
	c.MaddRequests = cmp.Or(c.MaddRequests, 100_000)
	c.Rounds = cmp.Or(c.Rounds, 1)
}

// ServeRow is one target's SET NX run.
type ServeRow struct {
	Target string `json:"target"`
	// KeySpace is the run's -r.
	KeySpace  int     `json:"key_space"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// Keys is DBSIZE after the run.
	Keys uint64 `json:"keys"`
	// UsedMemory is the growth of INFO memory's used_memory over the run
	// (for dedup the process's resident set, see package resp).
	UsedMemory  uint64  `json:"used_memory"`
	BytesPerKey float64 `json:"bytes_per_key"`
	// RSS is the growth of used_memory_rss.
	RSS            uint64  `json:"rss"`
	RSSBytesPerKey float64 `json:"rss_bytes_per_key"`
}

// MaddRow is one dedup mode's BF.MADD run.
type MaddRow struct {
	Target      string  `json:"target"`
	Items       int     `json:"items_per_call"`
	CallsPerSec float64 `json:"calls_per_sec"`
	ItemsPerSec float64 `json:"items_per_sec"`
}

// ServeResult is the comparison's outcome.
type ServeResult struct {
	Config ServeConfig `json:"config"`
	Set    []ServeRow  `json:"set_nx"`
	Madd   []MaddRow   `json:"bf_madd"`
	// Machine says where and when the run was made.
	Machine *Machine `json:"machine,omitempty"`
}

// Serve runs the comparison. It needs redis-benchmark; without
// redis-server the Redis row is left out.
func Serve(ctx context.Context, cfg ServeConfig, p Progress) (*ServeResult, error) {
	cfg.EnsureDefaults()
	if len(cfg.KeySpaces) > 0 {
		var all *ServeResult
		for i, k := range cfg.KeySpaces {
			if k < 1 {
				return nil, fmt.Errorf("bench: serve key space %d: want at least 1", k)
			}
			one := cfg
			one.KeySpaces, one.KeySpace, one.Requests = nil, k, 3*k
			if i > 0 {
				one.MaddRequests = -1
			}
			res, err := Serve(ctx, one, p)
			if err != nil {
				return nil, err
			}
			if all == nil {
				all = res
				all.Config = cfg
				continue
			}
			all.Set = append(all.Set, res.Set...)
			all.Madd = append(all.Madd, res.Madd...)
		}
		return all, nil
	}
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		return nil, ErrNoRedisBenchmark
	}
	res := &ServeResult{Config: cfg, Machine: StartMachine()}
	defer res.Machine.End()
	for _, mode := range cfg.Modes {
		if mode != "exact" && mode != "probabilistic" {
			return nil, fmt.Errorf("bench: serve mode %q: want exact or probabilistic", mode)
		}
	}
	if p != nil {
		p.Stage("serve: redis-benchmark runs", int64(cfg.Rounds*(1+2*len(cfg.Modes))))
	}
	step := func() {
		if p != nil {
			p.Add(1)
		}
	}
	setArgs := []string{"SET", "key:__rand_int__", "1", "NX", "EX", strconv.Itoa(cfg.TTL)}
	sets := map[string][]ServeRow{}
	madds := map[string][]MaddRow{}
	var order []string
	for range cfg.Rounds {
		rs, err := StartRedis(ctx)
		switch {
		case errors.Is(err, ErrNoRedis):
		case err != nil:
			return nil, err
		default:
			row, err := setRun(ctx, "redis-server "+redisVersion(ctx, rs.Addr), rs.Addr, cfg, setArgs)
			err = errors.Join(err, rs.Stop())
			if err != nil {
				return nil, err
			}
			sets[row.Target] = append(sets[row.Target], row)
			if len(sets[row.Target]) == 1 {
				order = append(order, row.Target)
			}
		}
		step()
		for _, mode := range cfg.Modes {
			row, madd, err := dedupRuns(ctx, mode, cfg, setArgs, step)
			if err != nil {
				return nil, err
			}
			sets[row.Target] = append(sets[row.Target], row)
			if len(sets[row.Target]) == 1 {
				order = append(order, row.Target)
			}
			if madd != nil {
				madds[madd.Target] = append(madds[madd.Target], *madd)
			}
		}
	}
	for _, name := range order {
		rows := sets[name]
		slices.SortFunc(rows, func(a, b ServeRow) int { return cmp.Compare(a.OpsPerSec, b.OpsPerSec) })
		res.Set = append(res.Set, rows[len(rows)/2])
		if m := madds[name]; len(m) > 0 {
			slices.SortFunc(m, func(a, b MaddRow) int { return cmp.Compare(a.ItemsPerSec, b.ItemsPerSec) })
			res.Madd = append(res.Madd, m[len(m)/2])
		}
	}
	return res, nil
}

// dedupRuns starts a dedup server in mode, runs SET NX against it, then
// BF.MADD against a fresh table of another server.
func dedupRuns(ctx context.Context, mode string, cfg ServeConfig, setArgs []string, step func()) (ServeRow, *MaddRow, error) {
	name := "dedup serve " + mode
	window := time.Duration(cfg.TTL) * time.Second
	start := func() (*resp.Server, string, func() error, error) {
		dir, err := os.MkdirTemp(cfg.Dir, "dedupbench-serve-")
		if err != nil {
			return nil, "", nil, fmt.Errorf("bench: serve dir: %w", err)
		}
		// Sized for the run: the distinct keys redis-benchmark sends in
		// one window.
		distinct := float64(min(cfg.Requests, cfg.KeySpace))
		srv, err := resp.New(resp.Options{
			Dir:   dir,
			Fsync: cfg.Fsync,
			Engine: dedup.Options{
				Window:            window,
				ExpectedRate:      distinct / window.Seconds(),
				FalsePositiveRate: cfg.FalsePositiveRate,
				Probabilistic:     mode == "probabilistic",
			},
		})
		if err != nil {
			os.RemoveAll(dir)
			return nil, "", nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", nil, errors.Join(fmt.Errorf("bench: listen: %w", err), srv.Shutdown(), os.RemoveAll(dir))
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ln) }()
		stop := func() error {
			err := srv.Shutdown()
			if serr := <-done; !errors.Is(serr, resp.ErrServerClosed) {
				err = errors.Join(err, serr)
			}
			return errors.Join(err, os.RemoveAll(dir))
		}
		return srv, ln.Addr().String(), stop, nil
	}

	_, addr, stop, err := start()
	if err != nil {
		return ServeRow{}, nil, err
	}
	row, err := setRun(ctx, name, addr, cfg, setArgs)
	if err = errors.Join(err, stop()); err != nil {
		return row, nil, err
	}
	step()
	if cfg.MaddRequests < 0 {
		step()
		return row, nil, nil
	}
	_, addr, stop, err = start()
	if err != nil {
		return row, nil, err
	}
	// The table is reserved for the items the run sends, as a RedisBloom
	// user would.
	rc := redis.NewClient(&redis.Options{Addr: addr})
	err = rc.Do(ctx, "BF.RESERVE", "t", cfg.FalsePositiveRate, cfg.MaddRequests*cfg.MaddItems).Err()
	rc.Close()
	if err != nil {
		return row, nil, errors.Join(fmt.Errorf("bench: bf.reserve: %w", err), stop())
	}
	madd := []string{"BF.MADD", "t"}
	for range cfg.MaddItems {
		madd = append(madd, "item:__rand_int__")
	}
	rps, err := redisBenchmark(ctx, addr, cfg, cfg.MaddRequests, madd)
	if err = errors.Join(err, stop()); err != nil {
		return row, nil, err
	}
	step()
	return row, &MaddRow{Target: name, Items: cfg.MaddItems, CallsPerSec: rps, ItemsPerSec: rps * float64(cfg.MaddItems)}, nil
}

// setRun measures SET NX on the server at addr: throughput, and the
// growth of its memory per key from INFO.
func setRun(ctx context.Context, name, addr string, cfg ServeConfig, args []string) (ServeRow, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Do(ctx, "MEMORY", "PURGE").Err(); err != nil {
		return ServeRow{}, fmt.Errorf("bench: %s memory purge: %w", name, err)
	}
	base, baseRSS, err := infoMemory(ctx, c)
	if err != nil {
		return ServeRow{}, err
	}
	rps, err := redisBenchmark(ctx, addr, cfg, cfg.Requests, args)
	if err != nil {
		return ServeRow{}, err
	}
	// Let everysec commit what is in flight, so that the memory is that of
	// remembered keys.
	if cfg.Fsync == resp.FsyncEverySec && !strings.HasPrefix(name, "redis") {
		time.Sleep(1500 * time.Millisecond)
	}
	// Both servers return freed pages to the system first (jemalloc's purge
	// on Redis, a collection and scavenge on dedup), so that the memory is
	// what the keys hold, not garbage.
	if err := c.Do(ctx, "MEMORY", "PURGE").Err(); err != nil {
		return ServeRow{}, fmt.Errorf("bench: %s memory purge: %w", name, err)
	}
	keys, err := c.DBSize(ctx).Result()
	if err != nil {
		return ServeRow{}, fmt.Errorf("bench: %s dbsize: %w", name, err)
	}
	used, usedRSS, err := infoMemory(ctx, c)
	if err != nil {
		return ServeRow{}, err
	}
	row := ServeRow{Target: name, KeySpace: cfg.KeySpace, OpsPerSec: rps, Keys: uint64(keys),
		UsedMemory: max(used, base) - base, RSS: max(usedRSS, baseRSS) - baseRSS}
	if keys > 0 {
		row.BytesPerKey = float64(row.UsedMemory) / float64(keys)
		row.RSSBytesPerKey = float64(row.RSS) / float64(keys)
	}
	return row, nil
}

// infoMemory reads used_memory and used_memory_rss.
func infoMemory(ctx context.Context, c *redis.Client) (used, rss uint64, err error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("bench: info memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			used, err = strconv.ParseUint(v, 10, 64)
		case "used_memory_rss":
			rss, err = strconv.ParseUint(v, 10, 64)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("bench: info memory %s %q: %w", k, v, err)
		}
	}
	return used, rss, nil
}

func redisVersion(ctx context.Context, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return ""
}

// redisBenchmark runs redis-benchmark with the command args and returns
// its requests per second.
func redisBenchmark(ctx context.Context, addr string, cfg ServeConfig, n int, args []string) (float64, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	cmdArgs := append([]string{"-h", host, "-p", port,
		"-P", strconv.Itoa(cfg.Pipeline), "-c", strconv.Itoa(cfg.Clients),
		"-r", strconv.Itoa(cfg.KeySpace), "-n", strconv.Itoa(n), "--csv"}, args...)
	cmd := exec.CommandContext(ctx, "redis-benchmark", cmdArgs...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("bench: redis-benchmark: %w: %s", err, stderr.String())
	}
	r := csv.NewReader(strings.NewReader(string(out)))
	r.FieldsPerRecord = -1
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("bench: redis-benchmark output %q: %w", out, err)
		}
		if len(rec) >= 2 && rec[0] != "test" {
			v, err := strconv.ParseFloat(rec[1], 64)
			if err != nil {
				return 0, fmt.Errorf("bench: redis-benchmark rps %q: %w", rec[1], err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("bench: redis-benchmark printed no result: %q %s", out, stderr.String())
}

// WriteText writes the comparison's tables, with dedup's ratios to Redis.
func (r *ServeResult) WriteText(w io.Writer) error {
	c := r.Config
	if c.Rounds > 1 {
		fmt.Fprintf(w, "median of %d rounds (redis, then each dedup mode, fresh servers each round)\n", c.Rounds)
	}
	if len(c.KeySpaces) > 0 {
		fmt.Fprintf(w, "redis-benchmark -P %d -c %d -r K -n 3K SET key:__rand_int__ 1 NX EX %d, K in %v\n\n",
			c.Pipeline, c.Clients, c.TTL, c.KeySpaces)
	} else {
		fmt.Fprintf(w, "redis-benchmark -P %d -c %d -r %d -n %d SET key:__rand_int__ 1 NX EX %d\n\n",
			c.Pipeline, c.Clients, c.KeySpace, c.Requests, c.TTL)
	}
	var rows [][]string
	for _, s := range r.Set {
		ref := r.redisRow(s.KeySpace)
		ops, mem := "-", "-"
		if ref != nil && ref.OpsPerSec > 0 && s.BytesPerKey > 0 {
			ops = fmt.Sprintf("%.2fx", s.OpsPerSec/ref.OpsPerSec)
			mem = fmt.Sprintf("1/%.1f", ref.BytesPerKey/s.BytesPerKey)
		}
		rows = append(rows, []string{s.Target, humanize.Count(s.OpsPerSec), ops, humanize.Count(float64(s.Keys)),
			mib(float64(s.UsedMemory)), bytesPerKey(s.BytesPerKey), mem, bytesPerKey(s.RSSBytesPerKey)})
	}
	if err := table(w, "target\tops/s\tvs redis\tkeys\tused_memory\tB/key\tvs redis\tRSS B/key", rows); err != nil {
		return err
	}
	if len(r.Madd) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nredis-benchmark -P %d -c %d -r %d -n %d BF.MADD t item:__rand_int__ x%d\n\n",
		c.Pipeline, c.Clients, c.KeySpace, c.MaddRequests, c.MaddItems)
	rows = nil
	for _, m := range r.Madd {
		rows = append(rows, []string{m.Target, strconv.Itoa(m.Items), humanize.Count(m.CallsPerSec), humanize.Count(m.ItemsPerSec)})
	}
	return table(w, "target\titems/call\tcalls/s\titems/s", rows)
}

// redisRow returns the redis-server row of the run with key space k, nil
// if there is none.
func (r *ServeResult) redisRow(k int) *ServeRow {
	for i := range r.Set {
		if s := &r.Set[i]; strings.HasPrefix(s.Target, "redis") && s.KeySpace == k {
			return s
		}
	}
	return nil
}

// PlotServe draws the SET NX throughput and the memory per key of each
// target, redis-server as the 1x line: serve, as SVG and PNG in dir.
func PlotServe(r *ServeResult, dir string) ([]string, error) {
	if len(r.Set) == 0 {
		return nil, errors.New("bench: serve chart: no rows")
	}
	bars := func(val func(ServeRow) float64) ([]Bar, int) {
		var bs []Bar
		ref := -1
		for i, s := range r.Set {
			label := s.Target
			if len(r.Config.KeySpaces) > 0 {
				label += " -r " + humanize.Count(float64(s.KeySpace))
			}
			bs = append(bs, Bar{Label: label, Value: val(s)})
			// One 1x line is redis-server's of a single key space.
			if strings.HasPrefix(s.Target, "redis") && len(r.Config.KeySpaces) == 0 {
				ref = i
			}
		}
		return bs, ref
	}
	bs, ref := bars(func(s ServeRow) float64 { return s.OpsPerSec })
	ops, err := BarChart{Title: "SET NX ops/s", XLabel: "operations per second", Bars: bs, Ref: ref, Log: true}.Plot()
	if err != nil {
		return nil, fmt.Errorf("bench: serve chart: %w", err)
	}
	bs, ref = bars(func(s ServeRow) float64 { return s.RSSBytesPerKey })
	mem, err := BarChart{Title: "RSS per key held", XLabel: "bytes of resident set per key", Bars: bs, Ref: ref, Log: true,
		HideLabels: true, Color: plotutil.Color(1)}.Plot()
	if err != nil {
		return nil, fmt.Errorf("bench: serve chart: %w", err)
	}
	c := r.Config
	caption := []string{fmt.Sprintf("dedupbench serve: redis-benchmark -P %d -c %d -r %d -n %d SET key:__rand_int__ 1 NX EX %d; dedup serve --fsync %s, FP %g.",
		c.Pipeline, c.Clients, c.KeySpace, c.Requests, c.TTL, c.Fsync, c.FalsePositiveRate),
		"RSS per key: growth of used_memory_rss (the server process's resident set) over the run, per key held. Dashed line: redis-server = 1x."}
	if r.Machine != nil {
		caption = append(caption, r.Machine.String())
	}
	return Figure{Title: "dedup serve against redis-server, same client", Panels: []*plot.Plot{ops, mem}, Caption: caption,
		Width: 10 * vg.Inch, Height: 3.2 * vg.Inch}.Save(dir, "serve")
}
