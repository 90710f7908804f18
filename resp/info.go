package resp

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/streamdedup/dedup/internal/procmem"
)

// Version is the version INFO reports as dedup_version.
const Version = "0.1.0"

// redisVersion is what INFO claims as redis_version: clients that gate
// features on it see a RESP2 server of the Redis 7 command set.
const redisVersion = "7.0.0"

// usedMemory is the resident memory of the whole process: filters, keys
// in flight, Pebble's memtables and block caches, the Go heap with its
// garbage, stacks and the binary. It is what the operating system charges
// for the server, so it can only overstate what the keys cost. Outside
// Linux it is the memory the Go runtime holds from the system.
func (s *Server) usedMemory() uint64 {
	pm, err := procmem.Read(0)
	m := pm.RSS
	if err != nil || m == 0 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		m = ms.Sys - ms.HeapReleased
	}
	for {
		p := s.peakRSS.Load()
		if m <= p || s.peakRSS.CompareAndSwap(p, m) {
			break
		}
	}
	return m
}

// goHeap is the Go heap's live and not-yet-swept objects.
func goHeap() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// human formats bytes as Redis's *_human fields do.
func human(b uint64) string {
	const unit = 1024
	if b < unit {
		return strconv.FormatUint(b, 10) + "B"
	}
	v, suffix := float64(b), "KMGTP"
	i := -1
	for v >= unit && i < len(suffix)-1 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + suffix[i:i+1]
}

// Info returns the INFO text of the given sections ("server", "clients",
// "memory", "persistence", "stats", "dedup", "keyspace"); none, "default", "all" or
// "everything" means all of them.
func (s *Server) Info(sections ...string) string {
	want := map[string]bool{}
	for _, sec := range sections {
		sec = strings.ToLower(sec)
		if sec == "all" || sec == "everything" || sec == "default" {
			want = map[string]bool{}
			break
		}
		want[sec] = true
	}
	all := len(want) == 0
	var b strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) }
	section := func(name string) bool {
		if !all && !want[strings.ToLower(name)] {
			return false
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + name + "\r\n")
		return true
	}
	tables := s.Tables()
	if section("Server") {
		line("redis_version", redisVersion)
		line("dedup_version", Version)
		line("redis_mode", s.redisMode())
		line("os", runtime.GOOS+" "+runtime.GOARCH)
		line("arch_bits", strconv.IntSize)
		line("go_version", runtime.Version())
		line("process_id", os.Getpid())
		line("tcp_port", s.port())
		up := time.Since(s.started)
		line("uptime_in_seconds", int64(up.Seconds()))
		line("uptime_in_days", int64(up.Hours()/24))
	}
	st := s.Stats()
	if section("Clients") {
		line("connected_clients", st.Clients)
		line("maxclients", s.cfg.MaxClients)
		line("blocked_clients", 0)
	}
	if section("Memory") {
		var filters uint64
		var inflight int64
		for _, t := range tables {
			filters += t.Stats.FilterBytes
			inflight += t.Stats.InFlightKeys
		}
		line("used_memory", st.UsedMemory)
		line("used_memory_human", human(st.UsedMemory))
		line("used_memory_rss", st.UsedMemory)
		line("used_memory_rss_human", human(st.UsedMemory))
		line("used_memory_peak", s.peakRSS.Load())
		line("used_memory_peak_human", human(s.peakRSS.Load()))
		line("used_memory_filters", filters)
		line("used_memory_go_heap", goHeap())
		line("inflight_keys", inflight)
		line("maxmemory", 0)
		line("mem_allocator", "go")
		line("used_memory_note", "used_memory is the whole process's resident set (filters, keys in flight, store caches, Go heap)")
	}
	if section("Persistence") {
		s.persistenceInfo(line)
	}
	if section("Stats") {
		var hits, misses uint64
		for _, t := range tables {
			hits += t.Stats.Duplicate + t.Stats.InFlightVerdicts
			misses += t.Stats.New
		}
		line("total_connections_received", st.TotalConnections)
		line("total_commands_processed", st.Commands)
		line("total_net_input_bytes", st.NetInputBytes)
		line("rejected_connections", st.RejectedConnections)
		line("rejected_requests", st.RejectedRequests)
		line("accept_errors", st.AcceptErrors)
		line("keyspace_hits", hits)
		line("keyspace_misses", misses)
		line("fsync_commits_requested", st.Syncs)
	}
	if section("Cluster") {
		line("cluster_enabled", b2i(s.cluster != nil))
	}
	if section("Dedup") {
		line("fsync", s.cfg.Fsync)
		line("window", s.cfg.Engine.Window)
		line("state", s.cfg.Dir)
		line("tables", len(tables))
		for _, t := range tables {
			var parts []string
			for _, f := range statsFields(t.Options, t.Stats) {
				parts = append(parts, fmt.Sprintf("%s=%v", f.name, f.v))
			}
			line("table_"+t.Name, strings.Join(parts, ","))
		}
	}
	if section("Keyspace") {
		for _, t := range tables {
			if t.Name == DefaultTable {
				// As DBSIZE: the keys committed and those in flight.
				n := t.Stats.FilterKeys + uint64(max(t.Stats.InFlightKeys, 0))
				line("db0", fmt.Sprintf("keys=%d,expires=%d,avg_ttl=0", n, n))
			}
		}
	}
	return b.String()
}

func (s *Server) port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return 0
	}
	_, p, _ := strings.Cut(s.ln.Addr().String(), "]:")
	if p == "" {
		_, p, _ = strings.Cut(s.ln.Addr().String(), ":")
	}
	n, _ := strconv.Atoi(p)
	return n
}

func (s *Server) cmdInfo(c *conn, _ *table, args [][]byte) {
	secs := make([]string, 0, len(args)-1)
	for _, a := range args[1:] {
		secs = append(secs, string(a))
	}
	c.WriteBulkString(s.Info(secs...))
}
