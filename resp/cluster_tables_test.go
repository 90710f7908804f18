package resp_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/resp"
)

// TestClusterMoveTablesTryAgain: while a range is copied, the BF.* and
// DEDUP.* tables whose names hash into it are answered -TRYAGAIN; a
// go-redis ClusterClient retries and, once the range is on the new
// owner, gets the answers the tables' history gives: items added before
// the move seen, new ones new.
func TestClusterMoveTablesTryAgain(t *testing.T) {
	dir := t.TempDir()
	ho := filepath.Join(dir, "handover")
	if err := os.MkdirAll(ho, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := resp.Options{Engine: dedup.Options{Window: time.Hour}, Cluster: &resp.ClusterOptions{Handover: "file://" + ho}}
	nodes := startCluster(t, 3, 1, dir, cfg)
	r := testMap([]string{nodes[0].addr, nodes[1].addr, nodes[2].addr}, 1).Ranges[0]
	name := func(prefix string) string {
		for i := 0; ; i++ {
			if n := fmt.Sprintf("%s{%d}", prefix, i); resp.KeySlot([]byte(n)) <= r.End {
				return n
			}
		}
	}
	bf, obs := name("bf"), name("jobs")
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[2].addr}, Protocol: 2,
		ReadTimeout: clientTimeout, WriteTimeout: clientTimeout, MaxRedirects: 16})
	defer cc.Close()
	for i := range 50 {
		if v, err := cc.Do(ctx, "BF.ADD", bf, fmt.Sprint("a", i)).Int(); err != nil || v != 1 {
			t.Fatalf("BF.ADD %s a%d = %v %v", bf, i, v, err)
		}
	}
	if v, err := cc.Do(ctx, "DEDUP.OBSERVE", obs, "x").StringSlice(); err != nil || v[0] != "new" {
		t.Fatalf("DEDUP.OBSERVE %s x = %v %v", obs, v, err)
	}
	type answer struct {
		what string
		v    any
		err  error
	}
	answers := make(chan answer, 4)
	var direct []error
	resp.SetMoveHook(func(step string) {
		if step != "exported" {
			return
		}
		// The range is copied: a plain client is told to try again...
		plain := client(t, nodes[0].addr)
		direct = append(direct, plain.Do(ctx, "BF.EXISTS", bf, "a1").Err(), plain.Do(ctx, "DEDUP.OBSERVE", obs, "x").Err())
		// ...and a cluster client retries until the move is over.
		for _, c := range [][]any{{"BF.ADD", bf, "a7"}, {"BF.ADD", bf, "b"}, {"DEDUP.OBSERVE", obs, "x"}, {"DEDUP.OBSERVE", obs, "y"}} {
			go func() {
				v, err := cc.Do(ctx, c...).Result()
				answers <- answer{fmt.Sprint(c...), v, err}
			}()
		}
		time.Sleep(100 * time.Millisecond)
	})
	defer resp.SetMoveHook(nil)
	if err := client(t, nodes[0].addr).Do(ctx, "DEDUP.CLUSTER", "MOVE", r.Start, r.End, nodes[1].addr).Err(); err != nil {
		t.Fatal(err)
	}
	for _, err := range direct {
		if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
			t.Fatalf("a table command during the copy answered %v, want TRYAGAIN", err)
		}
	}
	if len(direct) != 2 {
		t.Fatalf("the move never reached the copy step")
	}
	want := map[string]string{
		"BF.ADD" + bf + "a7":        "0",           // added before the move
		"BF.ADD" + bf + "b":         "1",           // new
		"DEDUP.OBSERVE" + obs + "x": "[duplicate]", // observed before; the copy committed it
		"DEDUP.OBSERVE" + obs + "y": "[new]",
	}
	for range 4 {
		a := <-answers
		key := strings.ReplaceAll(a.what, " ", "")
		if a.err != nil || fmt.Sprint(a.v) != want[key] {
			t.Errorf("%s after the move = %v %v, want %s", a.what, a.v, a.err, want[key])
		}
	}
	// The tables answer on the new owner, and the old one redirects.
	if v, err := client(t, nodes[1].addr).Do(ctx, "BF.EXISTS", bf, "a49").Int(); err != nil || v != 1 {
		t.Fatalf("BF.EXISTS at the new owner = %v %v", v, err)
	}
	if err := client(t, nodes[0].addr).Do(ctx, "BF.EXISTS", bf, "a49").Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatalf("BF.EXISTS at the old owner = %v, want MOVED", err)
	}
}
