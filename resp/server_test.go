package resp_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

func TestSetNX(t *testing.T) {
	_, addr := start(t, resp.Options{Engine: dedup.Options{Window: time.Hour}})
	c := client(t, addr)
	for i, tc := range []struct {
		key  string
		ttl  time.Duration
		want bool
	}{
		{"a", time.Minute, true},
		{"a", time.Minute, false}, // in flight
		{"b", 0, true},            // SETNX
		{"b", 0, false},
		{"a", 0, false},
		{"c", 30 * time.Millisecond, true}, // PX
		{"c", time.Hour, false},
	} {
		got, err := c.SetNX(ctx, tc.key, "1", tc.ttl).Result()
		if err != nil {
			t.Fatalf("%d: SetNX(%q, %v): %v", i, tc.key, tc.ttl, err)
		}
		if got != tc.want {
			t.Errorf("%d: SetNX(%q, %v) = %v, want %v", i, tc.key, tc.ttl, got, tc.want)
		}
	}
	// Committed keys are Duplicate: still nil.
	if _, err := c.Do(ctx, "DEDUP.COMMIT", "default").Result(); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.SetNX(ctx, "a", "1", time.Minute).Result(); err != nil || ok {
		t.Errorf("SetNX of a committed key = %v, %v; want false", ok, err)
	}
	n, err := c.Exists(ctx, "a", "b", "zz", "c").Result()
	if err != nil || n != 3 {
		t.Errorf("EXISTS a b zz c = %d, %v; want 3", n, err)
	}
	// EXISTS marks nothing.
	if ok, err := c.SetNX(ctx, "zz", "1", time.Minute).Result(); err != nil || !ok {
		t.Errorf("SetNX after EXISTS = %v, %v; want true", ok, err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 4 {
		t.Errorf("DBSIZE = %d, %v; want 4", n, err)
	}
}

func TestSetForms(t *testing.T) {
	_, addr := start(t, resp.Options{Engine: dedup.Options{Window: time.Hour}})
	c := client(t, addr)
	for _, tc := range []struct {
		args []any
		want string // substring of the error
	}{
		{[]any{"SET", "k", "v"}, "without NX"},
		{[]any{"SET", "k", "v", "XX"}, "XX is not supported"},
		{[]any{"SET", "k", "v", "NX", "GET"}, "GET is not supported"},
		{[]any{"SET", "k", "v", "NX", "KEEPTTL"}, "KEEPTTL is not supported"},
		{[]any{"SET", "k", "v", "NX", "EX", "7200"}, "longer than the dedup window 1h0m0s"},
		{[]any{"SET", "k", "v", "NX", "PX", "3600001"}, "window"},
		{[]any{"SET", "k", "v", "NX", "EX", "0"}, "invalid expire time"},
		{[]any{"SET", "k", "v", "NX", "EX", "10", "PX", "5"}, "syntax error"},
		{[]any{"SET", "k", "v", "NX", "EX"}, "syntax error"},
		{[]any{"SET", "", "v", "NX"}, "empty key"},
		{[]any{"SET", strings.Repeat("k", 5000), "v", "NX"}, "too large"},
		{[]any{"GET", "k"}, "unknown command 'GET'"},
		{[]any{"SELECT", "1"}, "out of range"},
		{[]any{"HELLO", "4"}, "NOPROTO unsupported protocol version"},
		{[]any{"AUTH", "x"}, "without any password"},
	} {
		err := c.Do(ctx, tc.args...).Err()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	// None of the refused forms marked k.
	if ok, err := c.SetNX(ctx, "k", "v", time.Hour).Result(); err != nil || !ok {
		t.Errorf("SetNX(k) after refused SETs = %v, %v; want true", ok, err)
	}
	// The connection commands clients send.
	for _, tc := range []struct {
		args []any
		want any
	}{
		{[]any{"PING"}, "PONG"},
		{[]any{"PING", "hi"}, "hi"},
		{[]any{"ECHO", "x"}, "x"},
		{[]any{"SELECT", "0"}, "OK"},
		{[]any{"CLIENT", "SETNAME", "me"}, "OK"},
		{[]any{"CLIENT", "GETNAME"}, "me"},
		{[]any{"CLIENT", "SETINFO", "LIB-NAME", "x"}, "OK"},
		{[]any{"COMMAND", "DOCS"}, []any{}},
		{[]any{"CONFIG", "GET", "save"}, []any{"save", ""}},
		{[]any{"CONFIG", "GET", "max*", "APPENDONLY"}, []any{"appendonly", "yes", "maxclients", "10000"}},
		{[]any{"CONFIG", "GET", "nothing*"}, []any{}},
		{[]any{"MEMORY", "PURGE"}, "OK"},
	} {
		got, err := c.Do(ctx, tc.args...).Result()
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%v = %v, %v; want %v", tc.args, got, err, tc.want)
		}
	}
	info, err := c.Info(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"# Server", "# Clients", "# Memory", "# Stats", "# Dedup", "used_memory:", "connected_clients:1", "table_default:mode=exact"} {
		if !strings.Contains(info, s) {
			t.Errorf("INFO lacks %q:\n%s", s, info)
		}
	}
	mem, err := c.Info(ctx, "memory").Result()
	if err != nil || strings.Contains(mem, "# Server") || !strings.Contains(mem, "used_memory:") {
		t.Errorf("INFO memory = %q, %v", mem, err)
	}
}

func TestPipeline(t *testing.T) {
	for _, fsync := range []string{resp.FsyncAlways, resp.FsyncEverySec, resp.FsyncNo} {
		t.Run(fsync, func(t *testing.T) {
			_, addr := start(t, resp.Options{Dir: t.TempDir(), Fsync: fsync, MaxPendingReplies: 7})
			c := client(t, addr)
			seen := map[string]bool{}
			for round := range 5 {
				pipe := c.Pipeline()
				var keys []string
				var cmds []*redis.BoolCmd
				for i := range 100 {
					k := fmt.Sprintf("key-%d", (round*37+i*11)%240)
					keys = append(keys, k)
					cmds = append(cmds, pipe.SetNX(ctx, k, 1, time.Minute))
				}
				if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
					t.Fatal(err)
				}
				for i, cmd := range cmds {
					got, err := cmd.Result()
					if err != nil {
						t.Fatal(err)
					}
					if want := !seen[keys[i]]; got != want {
						t.Fatalf("round %d: SetNX(%s) = %v, want %v", round, keys[i], got, want)
					}
					seen[keys[i]] = true
				}
			}
		})
	}
}

func TestBloom(t *testing.T) {
	_, addr := start(t, resp.Options{Dir: t.TempDir()})
	c := client(t, addr)
	do := func(args ...any) any {
		t.Helper()
		v, err := c.Do(ctx, args...).Result()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	doErr := func(want string, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want %q", args, err, want)
		}
	}
	if got := do("BF.RESERVE", "bf:users", "0.001", 100000); got != "OK" {
		t.Errorf("BF.RESERVE = %v", got)
	}
	doErr("item exists", "BF.RESERVE", "bf:users", "0.01", 10)
	doErr("error rate", "BF.RESERVE", "x", "1.5", 10)
	doErr("capacity", "BF.RESERVE", "x", "0.01", 0)
	doErr("EXPANSION must be in range [1, 32768]", "BF.RESERVE", "x", "0.01", 10, "EXPANSION", 0)
	doErr("ERR unknown option 'BOGUS': BF.RESERVE name error_rate capacity [EXPANSION n] [NONSCALING]", "BF.RESERVE", "x", "0.01", 10, "BOGUS")
	doErr("ERR EXPANSION needs a value: BF.RESERVE name error_rate capacity [EXPANSION n] [NONSCALING]", "BF.RESERVE", "x", "0.01", 10, "EXPANSION")
	insertUsage := "BF.INSERT name [CAPACITY n] [ERROR r] [EXPANSION n] [NOCREATE] [NONSCALING] ITEMS item [item ...]"
	doErr("ERR unknown option 'BOGUS': "+insertUsage, "BF.INSERT", "x", "NOCREATE", "BOGUS", "ITEMS", "a")
	doErr("ERR ERROR needs a value: "+insertUsage, "BF.INSERT", "x", "NONSCALING", "error")
	doErr("ERR EXPANSION must be in range [1, 32768]", "BF.INSERT", "x", "EXPANSION", "0", "ITEMS", "a")
	if got := do("BF.RESERVE", "x", "0.01", 10, "NONSCALING"); got != "OK" {
		t.Errorf("BF.RESERVE NONSCALING = %v", got)
	}
	if got := do("BF.RESERVE", "y", "0.01", 10, "EXPANSION", 4); got != "OK" {
		t.Errorf("BF.RESERVE EXPANSION 4 = %v", got)
	}
	doErr("invalid table name", "BF.ADD", "../etc", "a")
	doErr("not found", "BF.INFO", "nope")

	if got := do("BF.EXISTS", "bf:users", "u1"); got != int64(0) {
		t.Errorf("BF.EXISTS before add = %v", got)
	}
	if got := do("BF.ADD", "bf:users", "u1"); got != int64(1) {
		t.Errorf("BF.ADD new = %v", got)
	}
	if got := do("BF.ADD", "bf:users", "u1"); got != int64(0) {
		t.Errorf("BF.ADD again = %v", got)
	}
	if got := fmt.Sprint(do("BF.MADD", "bf:users", "u1", "u2", "u3", "u2")); got != "[0 1 1 0]" {
		t.Errorf("BF.MADD = %v", got)
	}
	if got := fmt.Sprint(do("BF.MEXISTS", "bf:users", "u3", "u9", "u1")); got != "[1 0 1]" {
		t.Errorf("BF.MEXISTS = %v", got)
	}
	info := fmt.Sprint(do("BF.INFO", "bf:users"))
	if !strings.Contains(info, "Capacity 100000") || !strings.Contains(info, "Number of items inserted 3") {
		t.Errorf("BF.INFO = %v", info)
	}
	if got := fmt.Sprint(do("BF.INFO", "bf:users", "CAPACITY")); got != "[100000]" {
		t.Errorf("BF.INFO CAPACITY = %v", got)
	}
	// An unknown name is created with the server's defaults; the default
	// table is the one SET NX marks.
	if got := do("BF.ADD", "fresh", "x"); got != int64(1) {
		t.Errorf("BF.ADD to a new name = %v", got)
	}
	if ok, _ := c.SetNX(ctx, "k1", 1, 0).Result(); !ok {
		t.Error("SETNX k1 not new")
	}
	if got := do("BF.ADD", "default", "k1"); got != int64(0) {
		t.Errorf("BF.ADD default k1 after SETNX k1 = %v", got)
	}
	if st := fmt.Sprint(do("DEDUP.STATS", "bf:users")); !strings.Contains(st, "false_positive_rate 0.001") {
		t.Errorf("DEDUP.STATS = %v", st)
	}
}

// TestRestart: a graceful shutdown commits and snapshots; every table and
// its options come back.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := resp.Options{Dir: dir, Fsync: resp.FsyncNo}
	srv, ln := listen(t, cfg)
	go srv.Serve(ln)
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, Protocol: 2})
	if err := c.Do(ctx, "BF.RESERVE", "t1", "0.002", 5000).Err(); err != nil {
		t.Fatal(err)
	}
	c.Do(ctx, "BF.MADD", "t1", "a", "b")
	c.SetNX(ctx, "k", 1, time.Minute)
	c.Do(ctx, "DEDUP.OBSERVE", "t2", "x")
	c.Do(ctx, "DEDUP.COMMIT", "t2", "offset-7")
	c.Close()
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}

	_, addr := start(t, cfg)
	c = client(t, addr)
	if got, err := c.Do(ctx, "BF.MEXISTS", "t1", "a", "b", "c").Result(); err != nil || fmt.Sprint(got) != "[1 1 0]" {
		t.Errorf("after restart BF.MEXISTS = %v, %v", got, err)
	}
	if ok, err := c.SetNX(ctx, "k", 1, time.Minute).Result(); err != nil || ok {
		t.Errorf("after restart SetNX(k) = %v, %v; want false", ok, err)
	}
	if got, err := c.Do(ctx, "DEDUP.CHECKPOINT", "t2").Result(); err != nil || got != "offset-7" {
		t.Errorf("after restart DEDUP.CHECKPOINT = %v, %v", got, err)
	}
	if got, err := c.Do(ctx, "BF.INFO", "t1", "CAPACITY").Result(); err != nil || fmt.Sprint(got) != "[5000]" {
		t.Errorf("after restart BF.INFO CAPACITY = %v, %v", got, err)
	}
}

func TestDedupCommands(t *testing.T) {
	_, addr := start(t, resp.Options{Fsync: resp.FsyncNo})
	c := client(t, addr)
	do := doer(t, c)
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"DEDUP.OBSERVE", "jobs", "a", "b", "a"}, "[new new in-flight]"},
		{[]any{"DEDUP.CHECKPOINT", "jobs"}, "error: redis: nil"},
		{[]any{"DEDUP.FORGET", "jobs", "b", "zz"}, "1"},
		{[]any{"DEDUP.OBSERVE", "jobs", "b"}, "[new]"},
		{[]any{"DEDUP.COMMIT", "jobs", "cp-1"}, "OK"},
		{[]any{"DEDUP.OBSERVE", "jobs", "a", "b", "c"}, "[duplicate duplicate new]"},
		{[]any{"DEDUP.FORGET", "jobs", "a"}, "0"},
		{[]any{"DEDUP.CHECKPOINT", "jobs"}, "cp-1"},
		{[]any{"DEDUP.STATS", "nope"}, "error: ERR not found: no table 'nope' (BF.RESERVE or DEDUP.RESERVE creates one, and so does a first BF.ADD, DEDUP.OBSERVE or DEDUP.BEGIN)"},
		{[]any{"DEDUP.OBSERVE", "jobs"}, "error: ERR wrong number of arguments for 'dedup.observe' command"},
	} {
		if got := do(tc.args...); got != tc.want {
			t.Errorf("%v = %s, want %s", tc.args, got, tc.want)
		}
	}
	st := do("DEDUP.STATS", "jobs")
	if !strings.Contains(st, "committed_keys 2") || !strings.Contains(st, "inflight_keys 1") {
		t.Errorf("DEDUP.STATS = %s", st)
	}
	if got := do("DEDUP.DONE", "jobs", "c"); !strings.Contains(got, "EXPLICITDONE") {
		t.Errorf("DEDUP.DONE on a table without EXPLICITDONE = %s", got)
	}
	// The admin commands read or commit a table; they create none.
	for _, cmd := range [][]any{
		{"DEDUP.COMMIT", "nope"}, {"DEDUP.COMMIT", "nope", "cp"}, {"DEDUP.CHECKPOINT", "nope"},
		{"DEDUP.STATS", "nope"}, {"DEDUP.DONE", "nope", "k"},
	} {
		if got := do(cmd...); !strings.HasPrefix(got, "error: ERR not found: no table 'nope'") {
			t.Errorf("%v = %s, want not found", cmd, got)
		}
	}
	if got := do("INFO", "dedup"); strings.Contains(got, "nope") {
		t.Errorf("INFO dedup after admin commands on 'nope' lists it:\n%s", got)
	}
}

func TestAuth(t *testing.T) {
	_, addr := start(t, resp.Options{RequirePass: "s3cret"})
	anon := client(t, addr)
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without AUTH: %v, want NOAUTH", err)
	}
	if err := anon.SetNX(ctx, "k", 1, 0).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("SETNX without AUTH: %v, want NOAUTH", err)
	}
	wrong := client(t, addr, func(o *redis.Options) { o.Password = "s3cres" })
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("PING with a wrong password: %v, want WRONGPASS", err)
	}
	good := client(t, addr, func(o *redis.Options) { o.Password = "s3cret" })
	if ok, err := good.SetNX(ctx, "k", 1, 0).Result(); err != nil || !ok {
		t.Errorf("SETNX after AUTH = %v, %v", ok, err)
	}
	user := client(t, addr, func(o *redis.Options) { o.Username, o.Password = "default", "s3cret" })
	if ok, err := user.SetNX(ctx, "k", 1, 0).Result(); err != nil || ok {
		t.Errorf("SETNX with AUTH default = %v, %v; want false", ok, err)
	}
}

// TestReserveRefusedLeavesNoTable: a BF.RESERVE the engine refuses (here
// filters too large for a 1e-300 error rate) leaves no table.json behind,
// so the name stays free: a later BF.RESERVE succeeds and no refused
// options are kept across restarts.
func TestReserveRefusedLeavesNoTable(t *testing.T) {
	dir := t.TempDir()
	_, addr := start(t, resp.Options{Dir: dir})
	c := client(t, addr)
	for _, capacity := range []string{"100", "99999999999999999"} {
		if err := c.Do(ctx, "BF.RESERVE", "t", "1e-300", capacity).Err(); err == nil {
			t.Fatalf("BF.RESERVE t 1e-300 %s succeeded", capacity)
		}
		if _, err := os.Stat(filepath.Join(dir, "t")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after a refused BF.RESERVE (capacity %s), %s/t: %v; want it absent", capacity, dir, err)
		}
	}
	if err := c.Do(ctx, "BF.RESERVE", "t", "0.01", 100).Err(); err != nil {
		t.Fatalf("BF.RESERVE t 0.01 100 after a refused one: %v", err)
	}
	if got, err := c.Do(ctx, "BF.ADD", "t", "a").Result(); err != nil || got != int64(1) {
		t.Errorf("BF.ADD t a = %v, %v; want 1", got, err)
	}
}

// TestMultiExec: MULTI/EXEC is what redis-py's pipeline() sends by default
// and go-redis's TxPipeline always. The commands between MULTI and EXEC
// are queued and run together, so a client never sees its transaction fail
// while its keys are marked (its retry would drop every event of the batch
// as a duplicate).
func TestMultiExec(t *testing.T) {
	_, addr := start(t, resp.Options{})
	c := client(t, addr)
	var setA, setA2 *redis.BoolCmd
	var bf *redis.BoolCmd
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		setA = p.SetNX(ctx, "a", 1, time.Minute)
		setA2 = p.SetNX(ctx, "a", 1, 0)
		bf = p.BFAdd(ctx, "t", "x")
		return nil
	})
	if err != nil {
		t.Fatalf("TxPipelined: %v", err)
	}
	if setA.Val() != true || setA2.Val() != false || bf.Val() != true {
		t.Errorf("in MULTI: SetNX a = %v, SetNX a = %v, BF.ADD t x = %v; want true false true",
			setA.Val(), setA2.Val(), bf.Val())
	}

	// An error while queuing discards the transaction: nothing is marked.
	got := raw(t, addr, "MULTI\r\nSETNX b 1\r\nNOSUCH x\r\nSETNX c\r\nEXEC\r\nSETNX b 1\r\nEXEC\r\nDISCARD\r\nQUIT\r\n")
	want := "+OK\r\n+QUEUED\r\n-ERR unknown command 'NOSUCH', with args beginning with: 'x' \r\n" +
		"-ERR wrong number of arguments for 'setnx' command\r\n" +
		"-EXECABORT Transaction discarded because of previous errors.\r\n" +
		":1\r\n-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n+OK\r\n"
	if got != want {
		t.Errorf("aborted transaction:\n got %q\nwant %q", got, want)
	}
	// DISCARD drops what was queued; nested MULTI and WATCH are refused
	// without aborting.
	got = raw(t, addr, "MULTI\r\nSETNX d 1\r\nDISCARD\r\nSETNX d 1\r\nMULTI\r\nMULTI\r\nWATCH d\r\nSETNX d 1\r\nSETNX e 1\r\nEXEC\r\nQUIT\r\n")
	want = "+OK\r\n+QUEUED\r\n+OK\r\n:1\r\n+OK\r\n-ERR MULTI calls can not be nested\r\n" +
		"-ERR WATCH inside MULTI is not allowed\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:0\r\n:1\r\n+OK\r\n"
	if got != want {
		t.Errorf("DISCARD and nesting:\n got %q\nwant %q", got, want)
	}
}

// TestMultiExecBounded: a transaction is held until EXEC, so it is bounded
// like one command; past the bound it is aborted, one error per command.
func TestMultiExecBounded(t *testing.T) {
	_, addr := start(t, resp.Options{MaxCommandSize: 20})
	got := raw(t, addr, "MULTI\r\nSETNX aaaa 1\r\nSETNX bbbb 1\r\nSETNX cccc 1\r\nEXEC\r\nSETNX aaaa 1\r\nQUIT\r\n")
	want := "+OK\r\n+QUEUED\r\n+QUEUED\r\n" +
		"-ERR transaction of more than 30 bytes exceeds max-command-size 20\r\n" +
		"-EXECABORT Transaction discarded because of previous errors.\r\n:1\r\n+OK\r\n"
	if got != want {
		t.Errorf("oversized transaction:\n got %q\nwant %q", got, want)
	}
}

// TestKeyspaceCountsInFlight: INFO's keyspace line counted the committed
// keys only, while DBSIZE counts the keys in flight too: right after a
// SETNX the two disagreed.
func TestKeyspaceCountsInFlight(t *testing.T) {
	srv, addr := start(t, resp.Options{Fsync: resp.FsyncNo})
	c := client(t, addr)
	for _, k := range []string{"a", "b", "c"} {
		if err := c.SetNX(ctx, k, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 3 {
		t.Fatalf("DBSIZE = %d, %v; want 3", n, err)
	}
	if info := srv.Info("keyspace"); !strings.Contains(info, "db0:keys=3,") {
		t.Errorf("INFO keyspace = %q, want db0:keys=3", info)
	}
}

// TestExistsMarksNothing: EXISTS, BF.EXISTS and BF.MEXISTS peek: a key
// they report absent is still new to the next SET NX, a key in flight or
// committed is present, and the verdict counters of INFO and DEDUP.STATS
// count only the commands that observe.
func TestExistsMarksNothing(t *testing.T) {
	srv, addr := start(t, resp.Options{Fsync: resp.FsyncNo})
	c := client(t, addr)
	do := func(args ...any) string {
		t.Helper()
		v, err := c.Do(ctx, args...).Result()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return fmt.Sprint(v)
	}
	for i := 0; i < 3; i++ {
		if n, err := c.Exists(ctx, "a", "b").Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS a b = %d, %v; want 0", n, err)
		}
		if got := do("BF.MEXISTS", "default", "a", "b"); got != "[0 0]" {
			t.Fatalf("BF.MEXISTS default a b = %s", got)
		}
		if got := do("BF.EXISTS", "default", "a"); got != "0" {
			t.Fatalf("BF.EXISTS default a = %s", got)
		}
	}
	if ok, err := c.SetNX(ctx, "a", 1, 0).Result(); err != nil || !ok {
		t.Fatalf("SETNX a after EXISTS = %v, %v; want true", ok, err)
	}
	// a in flight, then committed: present both times; b still absent.
	for _, commit := range []bool{false, true} {
		if commit {
			do("DEDUP.COMMIT", "default")
		}
		if n, err := c.Exists(ctx, "a", "b", "a").Result(); err != nil || n != 2 {
			t.Errorf("EXISTS a b a (committed %v) = %d, %v; want 2", commit, n, err)
		}
		if got := do("BF.MEXISTS", "default", "b", "a"); got != "[0 1]" {
			t.Errorf("BF.MEXISTS default b a (committed %v) = %s", commit, got)
		}
	}
	if ok, err := c.SetNX(ctx, "b", 1, 0).Result(); err != nil || !ok {
		t.Errorf("SETNX b after EXISTS = %v, %v; want true", ok, err)
	}
	// Two observes (a, b), both New; every EXISTS left the counts alone.
	st := do("DEDUP.STATS", "default")
	for _, want := range []string{"observed 2 ", "new 2 ", "duplicate 0 ", "inflight 0 "} {
		if !strings.Contains(st, want) {
			t.Errorf("DEDUP.STATS lacks %q: %s", want, st)
		}
	}
	info := srv.Info("stats")
	for _, want := range []string{"keyspace_hits:0\r\n", "keyspace_misses:2\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO stats lacks %q:\n%s", want, info)
		}
	}
}

// TestExistsConcurrent: EXISTS and BF.MEXISTS race SET NX and commits on
// the same keys. Each key is answered +OK by exactly one SET NX however
// many EXISTS probe it meanwhile, and once its SET NX has answered, every
// EXISTS reports it.
func TestExistsConcurrent(t *testing.T) {
	_, addr := start(t, resp.Options{Fsync: resp.FsyncNo})
	const keys, setters, probers = 300, 4, 4
	var wg sync.WaitGroup
	var newCount atomic.Int64
	stop := make(chan struct{})
	for p := 0; p < probers; p++ {
		c := client(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprint("k", i%keys)
				if err := c.Exists(ctx, k).Err(); err != nil {
					t.Error(err)
					return
				}
				if err := c.Do(ctx, "BF.MEXISTS", "default", k, "never").Err(); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					if err := c.Do(ctx, "DEDUP.COMMIT", "default").Err(); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	var sw sync.WaitGroup
	for s := 0; s < setters; s++ {
		c := client(t, addr)
		sw.Add(1)
		go func() {
			defer sw.Done()
			for i := 0; i < keys; i++ {
				k := fmt.Sprint("k", i)
				ok, err := c.SetNX(ctx, k, 1, 0).Result()
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					newCount.Add(1)
				}
				if n, err := c.Exists(ctx, k).Result(); err != nil || n != 1 {
					t.Errorf("EXISTS %s after its SETNX = %d, %v; want 1", k, n, err)
					return
				}
			}
		}()
	}
	sw.Wait()
	close(stop)
	wg.Wait()
	if n := newCount.Load(); n != keys {
		t.Errorf("%d SETNX answered +OK for %d keys; want one each", n, keys)
	}
	c := client(t, addr)
	if n, err := c.Exists(ctx, "never").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS never = %d, %v; want 0", n, err)
	}
}

// TestExplicitDone: a worker pool over DEDUP.* on a table reserved with
// EXPLICITDONE. Keys observed New stay in flight across commits until
// DEDUP.DONE; DEDUP.FORGET releases them until then. After a restart the
// forgotten keys and the keys never Done are New again, the Done ones
// Duplicate, and the table still waits for DEDUP.DONE.
func TestExplicitDone(t *testing.T) {
	dir := t.TempDir()
	cfg := resp.Options{Dir: dir, Fsync: resp.FsyncEverySec}
	srv, ln := listen(t, cfg)
	go srv.Serve(ln)
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, MaxRetries: -1, Protocol: 2})
	do := doer(t, c)
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"DEDUP.RESERVE", "jobs", "WINDOW", 600000, "ERROR_RATE", "0.001", "CAPACITY", 100000, "EXPLICITDONE"}, "OK"},
		{[]any{"DEDUP.RESERVE", "jobs"}, "error: ERR item exists"},
		{[]any{"DEDUP.RESERVE", "x", "WINDOW", 0}, "error: ERR WINDOW '0' is not a positive number of milliseconds"},
		{[]any{"DEDUP.RESERVE", "x", "ERROR_RATE", "1"}, "error: ERR ERROR_RATE '1' is not between 0 and 1 (exclusive)"},
		{[]any{"DEDUP.RESERVE", "x", "CAPACITY"}, "error: ERR CAPACITY needs a value: " + "DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r] [CAPACITY n] [EXPLICITDONE] [REFRESH]"},
		{[]any{"DEDUP.RESERVE", "x", "NONSCALING"}, "error: ERR unknown option 'NONSCALING': DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r] [CAPACITY n] [EXPLICITDONE] [REFRESH]"},
		{[]any{"DEDUP.RESERVE", "x", "explicitdone", "EXPLICITDONE"}, "error: ERR EXPLICITDONE given twice: DEDUP.RESERVE table [WINDOW ms] [ERROR_RATE r] [CAPACITY n] [EXPLICITDONE] [REFRESH]"},
		// Eight events, one worker each: a-c succeed, d-e fail, f-h are
		// still being processed at the restart.
		{[]any{"DEDUP.OBSERVE", "jobs", "a", "b", "c", "d", "e", "f", "g", "h"}, "[new new new new new new new new]"},
		{[]any{"DEDUP.DONE", "jobs", "a", "b"}, "2"},
		{[]any{"DEDUP.FORGET", "jobs", "d", "e"}, "2"},
		{[]any{"DEDUP.COMMIT", "jobs", "cp-1"}, "OK"},
		// Committed: Duplicate. Still in flight across the commit: c, f-h.
		{[]any{"DEDUP.OBSERVE", "jobs", "a", "c", "f"}, "[duplicate in-flight in-flight]"},
		{[]any{"BF.MEXISTS", "jobs", "a", "c", "d"}, "[1 1 0]"},
		// A key Done is on its way into the next commit: FORGET leaves it.
		{[]any{"DEDUP.DONE", "jobs", "c", "c", "zz", "a", "d"}, "1"},
		{[]any{"DEDUP.FORGET", "jobs", "c", "f"}, "1"},
		{[]any{"DEDUP.DONE", "jobs", ""}, "error: ERR dedup: DoneBatch entry 0: empty key"},
		{[]any{"DEDUP.DONE", "jobs"}, "error: ERR wrong number of arguments for 'dedup.done' command"},
		{[]any{"DEDUP.CHECKPOINT", "jobs"}, "cp-1"},
	} {
		if got := do(tc.args...); got != tc.want {
			t.Errorf("%v = %s\n want %s", tc.args, got, tc.want)
		}
	}
	if st := do("DEDUP.STATS", "jobs"); !strings.Contains(st, "explicit_done 1 ") || !strings.Contains(st, "window 10m0s ") ||
		!strings.Contains(st, "capacity 100000 ") || !strings.Contains(st, "false_positive_rate 0.001 ") {
		t.Errorf("DEDUP.STATS jobs = %s", st)
	}
	b, err := os.ReadFile(filepath.Join(dir, "jobs", "table.json"))
	if err != nil || !strings.Contains(string(b), `"explicit_done": true`) {
		t.Errorf("jobs/table.json = %s, %v; want explicit_done true", b, err)
	}
	c.Close()
	// Shutdown commits the Done keys (c) and drops g and h, never Done,
	// as a crash would.
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}

	_, addr := start(t, cfg)
	c = client(t, addr)
	if got, err := c.Do(ctx, "DEDUP.OBSERVE", "jobs", "a", "b", "c", "d", "e", "f", "g", "h").Result(); err != nil ||
		fmt.Sprint(got) != "[duplicate duplicate duplicate new new new new new]" {
		t.Errorf("after restart DEDUP.OBSERVE = %v, %v", got, err)
	}
	if got, err := c.Do(ctx, "DEDUP.DONE", "jobs", "d").Result(); err != nil || got != int64(1) {
		t.Errorf("after restart DEDUP.DONE jobs d = %v, %v; want 1", got, err)
	}
	// Past the everysec commits, e is in flight still: never Done.
	if got, err := c.Do(ctx, "DEDUP.COMMIT", "jobs").Result(); err != nil || got != "OK" {
		t.Fatalf("DEDUP.COMMIT = %v, %v", got, err)
	}
	if got, err := c.Do(ctx, "DEDUP.FORGET", "jobs", "d", "e").Result(); err != nil || got != int64(1) {
		t.Errorf("after a commit DEDUP.FORGET jobs d e = %v, %v; want 1 (e)", got, err)
	}
}

// TestDoneAlways: under --fsync always a DEDUP.DONE reply waits for the
// commit of its keys: the Syncs counter shows one, and OBSERVE alone on
// an EXPLICITDONE table waits for none.
func TestDoneAlways(t *testing.T) {
	srv, addr := start(t, resp.Options{Dir: t.TempDir(), Fsync: resp.FsyncAlways})
	c := client(t, addr)
	if err := c.Do(ctx, "DEDUP.RESERVE", "w", "EXPLICITDONE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "BF.MADD", "w", "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	if n := srv.Stats().Syncs; n != 0 {
		t.Errorf("after BF.MADD on an EXPLICITDONE table: %d syncs, want 0", n)
	}
	if got, err := c.Do(ctx, "DEDUP.DONE", "w", "a").Result(); err != nil || got != int64(1) {
		t.Fatalf("DEDUP.DONE w a = %v, %v", got, err)
	}
	if n := srv.Stats().Syncs; n != 1 {
		t.Errorf("after DEDUP.DONE: %d syncs, want 1", n)
	}
	if got, err := c.Do(ctx, "DEDUP.STATS", "w").Result(); err != nil || !strings.Contains(fmt.Sprint(got), "committed_keys 1 ") {
		t.Errorf("after DEDUP.DONE, DEDUP.STATS = %v, %v; want committed_keys 1", got, err)
	}
}

// TestSetWithoutNXErrorIsComplete: refusing a plain SET once answered a
// sentence cut off at "a remembered key cannot be".
func TestSetWithoutNXErrorIsComplete(t *testing.T) {
	_, addr := start(t, resp.Options{Engine: dedup.Options{Window: time.Hour}})
	err := client(t, addr).Do(ctx, "SET", "order:44", "1").Err()
	want := "ERR dedup serves SET key value NX [EX seconds|PX milliseconds] only: without NX a SET would overwrite, and a remembered key cannot be overwritten"
	if err == nil || err.Error() != want {
		t.Errorf("SET order:44 1: error %v, want %q", err, want)
	}
}

// TestBFInfoAfterReserveReportsPlan: BF.INFO of a table just made with
// BF.RESERVE reports, as RedisBloom does for the filter it reserved, the
// filter memory the table plans for its capacity (the engine's own
// ceiling) and the filters that plan holds, before any item is added.
func TestBFInfoAfterReserveReportsPlan(t *testing.T) {
	eng := dedup.Options{Window: time.Hour, Shards: 8, Generations: 3}
	_, addr := start(t, resp.Options{Dir: t.TempDir(), Engine: eng})
	c := client(t, addr)
	if err := c.Do(ctx, "BF.RESERVE", "bf:orders", "0.001", 3600000).Err(); err != nil {
		t.Fatal(err)
	}
	// The table's engine plans its filters for the reserved capacity over
	// the window, at the reserved error rate: the ceiling Open works from.
	eng.ExpectedRate, eng.FalsePositiveRate = 1000, 0.001
	ceiling, err := eng.FilterCeiling()
	if err != nil {
		t.Fatal(err)
	}
	mib := float64(ceiling) / (1 << 20)
	field := func(name string) int64 {
		t.Helper()
		v, err := c.Do(ctx, "BF.INFO", "bf:orders", name).Slice()
		if err != nil || len(v) != 1 {
			t.Fatalf("BF.INFO bf:orders %s = %v, %v", name, v, err)
		}
		return v[0].(int64)
	}
	check := func(when string) {
		t.Helper()
		if size := float64(field("SIZE")) / (1 << 20); size < mib-0.05 || size > mib+0.05 {
			t.Errorf("%s: BF.INFO SIZE %.3f MiB, the engine plans about %.1f MiB", when, size, mib)
		}
		if n := field("FILTERS"); n != 8*(3+1) {
			t.Errorf("%s: BF.INFO FILTERS %d, want %d (8 shards of 3+1 generations)", when, n, 8*(3+1))
		}
	}
	check("just reserved")
	if err := c.Do(ctx, "BF.MADD", "bf:orders", "o1", "o2", "o3").Err(); err != nil {
		t.Fatal(err)
	}
	check("three items in")
}

// TestOptionsDefaults: WithDefaults gives every zero field of Options its
// documented default and keeps every field that is set.
func TestOptionsDefaults(t *testing.T) {
	got := (&resp.Options{}).WithDefaults()
	want := resp.Options{
		Fsync: resp.FsyncEverySec, SnapshotInterval: time.Minute, MaxClients: 10000,
		CommitKeys: 1 << 16, MaxArgSize: 1 << 20, MaxArgs: 1 << 20, MaxCommandSize: 64 << 20,
		MaxPendingReplies: 1024, MaxTables: 64, MaxReplyBuffer: 64 << 20, WriteTimeout: 30 * time.Second,
	}
	want.Engine.WithDefaults()
	got.Engine.Now, want.Engine.Now = nil, nil // funcs never compare equal
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("WithDefaults of a zero Options = %+v\n want %+v", *got, want)
	}
	set := resp.Options{
		Fsync: resp.FsyncAlways, SnapshotInterval: time.Hour, MaxClients: 3, CommitKeys: 5, MaxArgSize: 7,
		MaxArgs: 11, MaxCommandSize: 13, MaxPendingReplies: 17, MaxTables: 19, MaxReplyBuffer: 23, WriteTimeout: time.Second,
	}
	in := set
	set.Engine.WithDefaults()
	got = in.WithDefaults()
	got.Engine.Now, set.Engine.Now = nil, nil
	if !reflect.DeepEqual(*got, set) {
		t.Errorf("WithDefaults changed set fields: %+v\n want %+v", *got, set)
	}
}

// TestStateIsPrivate: under a umask that lets everyone read, the server's
// state directory, a table's directory and its table.json are 0700 and
// 0600; the directory's existing parent keeps its mode.
func TestStateIsPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	parent := t.TempDir()
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "state")
	_, addr := start(t, resp.Options{Dir: dir})
	c := client(t, addr)
	if err := c.Do(ctx, "BF.RESERVE", "bf:users", "0.001", 1000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "BF.ADD", "bf:users", "a").Err(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{parent: 0o755, dir: 0o700,
		filepath.Join(dir, "bf:users"): 0o700, filepath.Join(dir, "bf:users", "table.json"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
}
