package resp_test

import (
	"strings"
	"testing"

	"github.com/streamdedup/dedup/resp"
)

// TestIdempotencyRenew: DEDUP.RENEW extends a claim's lease; a token
// that no longer owns the key gets -LEASELOST; the errors no retry passes
// have codes of their own.
func TestIdempotencyRenew(t *testing.T) {
	_, addr := start(t, resp.Options{Dir: t.TempDir(), Fsync: resp.FsyncNo})
	c := client(t, addr)
	v, err := c.Do(ctx, "DEDUP.BEGIN", "orders", "k", "fp", 200).Slice()
	if err != nil || v[0] != "new" {
		t.Fatalf("BEGIN = %v, %v", v, err)
	}
	tok := v[1].(string)
	if err := c.Do(ctx, "DEDUP.RENEW", "orders", "k", tok, 60000).Err(); err != nil {
		t.Fatal(err)
	}
	v, err = c.Do(ctx, "DEDUP.BEGIN", "orders", "k", "fp", 200).Slice()
	if err != nil || v[0] != "inprogress" || v[1].(int64) < 59000 {
		t.Fatalf("BEGIN after RENEW 60000 = %v, %v; want inprogress with about 60000 ms left", v, err)
	}
	if err := c.Do(ctx, "DEDUP.RENEW", "orders", "k", strings.Repeat("0", 32), 60000).Err(); err == nil || !strings.HasPrefix(err.Error(), "LEASELOST") {
		t.Fatalf("RENEW with another token: %v, want LEASELOST", err)
	}
	if err := c.Do(ctx, "DEDUP.RENEW", "orders", "k", tok, 0).Err(); err == nil || !strings.Contains(err.Error(), "lease-ms must be a positive integer") {
		t.Fatalf("RENEW 0: %v", err)
	}
	if err := c.Do(ctx, "DEDUP.RENEW", "orders", "k", tok, int64(1e12)).Err(); err == nil || !strings.HasPrefix(err.Error(), "BADLEASE") {
		t.Fatalf("RENEW over the window: %v, want BADLEASE", err)
	}
	if err := c.Do(ctx, "DEDUP.BEGIN", "orders", "k2", "fp", int64(1e12)).Err(); err == nil || !strings.HasPrefix(err.Error(), "BADLEASE") {
		t.Fatalf("BEGIN over the window: %v, want BADLEASE", err)
	}
	if err := c.Do(ctx, "DEDUP.BEGIN", "orders", strings.Repeat("k", 5000), "fp", 1000).Err(); err == nil || !strings.HasPrefix(err.Error(), "KEYTOOLARGE") {
		t.Fatalf("BEGIN of a 5000-byte key: %v, want KEYTOOLARGE", err)
	}
	if err := c.Do(ctx, "DEDUP.COMPLETE", "orders", "k", tok, "done").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "DEDUP.RENEW", "orders", "k", tok, 1000).Err(); err == nil || !strings.HasPrefix(err.Error(), "LEASELOST") {
		t.Fatalf("RENEW of a completed key: %v, want LEASELOST", err)
	}
}
