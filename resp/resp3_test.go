package resp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// TestRESP3GoRedis: go-redis v9 with Protocol 3 sends HELLO 3 and gets
// RESP3 replies: booleans for BF.*, maps for BF.INFO, DEDUP.STATS and
// CONFIG GET, nulls, doubles. The same calls with Protocol 2 get RESP2's.
func TestRESP3GoRedis(t *testing.T) {
	_, addr := start(t, resp.Options{RequirePass: "pw", Engine: dedup.Options{Window: time.Hour}})
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("protocol=%d", proto), func(t *testing.T) {
			c := client(t, addr, func(o *redis.Options) { o.Protocol, o.Password = proto, "pw" })
			p := fmt.Sprint(proto)
			do := func(args ...any) any {
				t.Helper()
				v, err := c.Do(ctx, args...).Result()
				if err != nil && err != redis.Nil {
					t.Fatalf("%v: %v", args, err)
				}
				return v
			}
			if ok, err := c.SetNX(ctx, "k"+p, 1, time.Minute).Result(); err != nil || !ok {
				t.Errorf("SetNX new = %v, %v", ok, err)
			}
			if ok, err := c.SetNX(ctx, "k"+p, 1, time.Minute).Result(); err != nil || ok {
				t.Errorf("SetNX seen = %v, %v", ok, err)
			}
			one, zero := any(int64(1)), any(int64(0))
			if proto == 3 {
				one, zero = true, false
			}
			for _, tc := range []struct {
				args []any
				want any
			}{
				{[]any{"BF.ADD", "t" + p, "a"}, one},
				{[]any{"BF.ADD", "t" + p, "a"}, zero},
				{[]any{"BF.MADD", "t" + p, "a", "b"}, []any{zero, one}},
				{[]any{"BF.EXISTS", "t" + p, "b"}, one},
				{[]any{"BF.MEXISTS", "t" + p, "b", "c"}, []any{one, zero}},
				{[]any{"BF.INSERT", "t" + p, "ITEMS", "c", "a"}, []any{one, zero}},
				{[]any{"BF.CARD", "t" + p}, int64(3)},
				{[]any{"SET", "n" + p, 1, "NX"}, "OK"},
				{[]any{"SET", "n" + p, 1, "NX"}, nil},
				{[]any{"CLIENT", "GETNAME"}, nil},
				{[]any{"DEDUP.CHECKPOINT", "t" + p}, nil},
			} {
				if got := do(tc.args...); fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("%v = %#v, want %#v", tc.args, got, tc.want)
				}
			}
			info := do("BF.INFO", "t"+p)
			st := do("DEDUP.STATS", "t"+p)
			cfg := do("CONFIG", "GET", "appendfsync")
			if proto == 3 {
				if m, ok := info.(map[any]any); !ok || m["Number of items inserted"] != int64(3) {
					t.Errorf("BF.INFO = %#v, want a map", info)
				}
				if m, ok := st.(map[any]any); !ok || m["false_positive_rate"] != 0.01 || m["new"] != int64(3) {
					t.Errorf("DEDUP.STATS = %#v, want a map with a double false_positive_rate", st)
				}
				if m, ok := cfg.(map[any]any); !ok || m["appendfsync"] != "everysec" {
					t.Errorf("CONFIG GET = %#v, want a map", cfg)
				}
			} else {
				if a, ok := info.([]any); !ok || len(a) != 10 || a[6] != "Number of items inserted" || a[7] != int64(3) {
					t.Errorf("BF.INFO = %#v, want a flat array", info)
				}
				if a, ok := st.([]any); !ok || len(a)%2 != 0 || fmt.Sprint(a[:2]) != "[mode exact]" {
					t.Errorf("DEDUP.STATS = %#v, want a flat array", st)
				}
				if fmt.Sprint(cfg) != "[appendfsync everysec]" {
					t.Errorf("CONFIG GET = %#v", cfg)
				}
			}
		})
	}
}

// TestHello: HELLO's forms, in raw bytes: RESP3 framing only after HELLO
// 3, AUTH inside HELLO, and the errors Redis gives.
func TestHello(t *testing.T) {
	_, addr := start(t, resp.Options{RequirePass: "pw"})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	send := func(cmd string) string {
		t.Helper()
		io.WriteString(c, cmd+"\r\n")
		v, err := readValue(r)
		if err != nil {
			t.Fatalf("%s: %v (read %q)", cmd, err, v)
		}
		return v
	}
	for _, tc := range []struct {
		cmd  string
		want string
	}{
		{"HELLO 3", "-NOAUTH HELLO must be called with the client already authenticated"},
		{"HELLO 3 AUTH default nope", "-WRONGPASS"},
		{"HELLO 4 AUTH default pw", "-NOPROTO unsupported protocol version\r\n"},
		{"HELLO x", "-ERR Protocol version is not an integer or out of range\r\n"},
		{"HELLO 3 AUTH default pw SETNAME me", "%7\r\n$6\r\nserver\r\n$5\r\ndedup\r\n$7\r\nversion\r\n"},
		{"CLIENT GETNAME", "$2\r\nme\r\n"},
		{"SET a 1 NX", "+OK\r\n"},
		{"SET a 1 NX", "_\r\n"},
		{"BF.ADD t x", "#t\r\n"},
		{"BF.MEXISTS t x y", "*2\r\n#t\r\n#f\r\n"},
		{"CONFIG GET databases", "%1\r\n$9\r\ndatabases\r\n$1\r\n1\r\n"},
		{"COMMAND INFO bf.add nosuch", "*2\r\n*10\r\n$6\r\nbf.add\r\n:3\r\n~2\r\n+write\r\n+fast\r\n:1\r\n:1\r\n:1\r\n~0\r\n*0\r\n*1\r\n%3\r\n$5\r\nflags\r\n~2\r\n+RW\r\n+UPDATE\r\n$12\r\nbegin_search\r\n%2\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n%1\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n%2\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n%3\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n*0\r\n_\r\n"},
		{"HELLO 2", "*14\r\n"},
	} {
		if got := send(tc.cmd); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s = %q, want %q", tc.cmd, got, tc.want)
		}
	}
	if got := send("SET a 1 NX"); got != "$-1\r\n" {
		t.Errorf("after HELLO 2, SET of a seen key = %q, want RESP2's null", got)
	}
}

// readValue reads one RESP2 or RESP3 value and returns its bytes.
func readValue(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil || len(line) < 3 {
		return line, fmt.Errorf("reading a value: %v", err)
	}
	n := 0
	fmt.Sscan(line[1:len(line)-2], &n)
	switch line[0] {
	case '$', '=', '!':
		if n < 0 {
			return line, nil
		}
		b := make([]byte, n+2)
		_, err := io.ReadFull(r, b)
		return line + string(b), err
	case '*', '~', '>', '%':
		if line[0] == '%' {
			n *= 2
		}
		out := line
		for range max(n, 0) {
			v, err := readValue(r)
			out += v
			if err != nil {
				return out, err
			}
		}
		return out, nil
	}
	return line, nil
}

// TestCommandTable: COMMAND COUNT and COMMAND answer every command the
// server serves, and each entry's arity is the one it checks.
func TestCommandTable(t *testing.T) {
	_, addr := start(t, resp.Options{})
	c := client(t, addr)
	n, err := c.Do(ctx, "COMMAND", "COUNT").Int()
	if err != nil || n < 30 {
		t.Fatalf("COMMAND COUNT = %d, %v", n, err)
	}
	infos, err := c.Command(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != n {
		t.Errorf("COMMAND lists %d commands, COMMAND COUNT says %d", len(infos), n)
	}
	for _, name := range []string{"set", "bf.madd", "bf.insert", "bf.card", "dedup.observe", "hello", "exec"} {
		if infos[name] == nil {
			t.Errorf("COMMAND lacks %s", name)
		}
	}
	// Each listed arity is enforced: one argument too many for a fixed
	// arity, one too few for a minimum.
	for name, info := range infos {
		k := int(info.Arity)
		args := []any{name}
		switch {
		case k > 0:
			for range k {
				args = append(args, "x")
			}
		case -k > 1:
			for i := 1; i < -k-1; i++ {
				args = append(args, "x")
			}
		default:
			continue // any number
		}
		err := c.Do(ctx, args...).Err()
		if err == nil || !strings.Contains(err.Error(), "wrong number of arguments for '"+name+"'") {
			t.Errorf("%s with %d arguments: %v, want its arity error", name, len(args), err)
		}
	}
}
