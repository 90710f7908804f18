package kafka

import (
	"context"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kgo"
)

// onRevoked closes the engines of revoked partitions. Rebalances wait for
// the loop's AllowRebalance, so their transactions have ended; what the
// loop does before its next poll waits for them (roundMu).
func (c *Consumer) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if len(revoked) > 0 {
		c.rebalanced.Store(true)
	}
	c.closeParts(revoked, "revoked")
}

// onLost closes the engines of lost partitions; their staged work, if any,
// was released when the transaction aborted.
func (c *Consumer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.rebalanced.Store(true)
	c.closeParts(lost, "lost")
}

func (c *Consumer) closeParts(m map[string][]int32, why string) {
	c.roundMu.Lock()
	defer c.roundMu.Unlock()
	// The keys in flight belong to committed transactions (the loop is
	// between two): commit them before closing, so that the partition
	// needs no replay if it comes back.
	committed := true
	if err := c.commitRound(true); err != nil {
		// Leave it for the loop, which ends the session on it.
		c.commitErr.CompareAndSwap(nil, &err)
		committed = false
	}
	var parts []*partition
	for topic, ps := range m {
		for _, p := range ps {
			c.mu.Lock()
			pt := c.parts[tp{topic, p}]
			delete(c.parts, tp{topic, p})
			c.mu.Unlock()
			if pt != nil {
				parts = append(parts, pt)
			}
		}
	}
	if why == "revoked" && committed {
		// Export the ready ones: the next owner imports them. A partition
		// still being made ready has nothing newer than its last owner's.
		var ready []*partition
		c.mu.Lock()
		for _, pt := range parts {
			if pt.ready && len(pt.news) == 0 {
				ready = append(ready, pt)
			}
		}
		c.mu.Unlock()
		c.exportRevoked(ready)
	}
	for _, pt := range parts {
		c.logf("kafka: %s %s", pt.tp, why)
		if len(pt.news) > 0 {
			c.logf("kafka: %s %s with %d keys staged; dropping them", why, pt.tp, len(pt.news))
		}
		if err := pt.eng.Close(); err != nil {
			c.logf("kafka: close %s (%s): %v", pt.tp, why, err)
		}
	}
}

// closeAll commits the keys of committed transactions and closes every
// engine, dropping what else is in flight.
func (c *Consumer) closeAll() {
	c.roundMu.Lock()
	defer c.roundMu.Unlock()
	if err := c.commitRound(true); err != nil {
		c.logf("kafka: %v", err)
	}
	c.mu.Lock()
	parts := c.parts
	c.parts = make(map[tp]*partition)
	c.mu.Unlock()
	for _, pt := range parts {
		if err := pt.eng.Close(); err != nil {
			c.logf("kafka: close %s: %v", pt.tp, err)
		}
	}
	c.staged = c.staged[:0]
}

// dir is the state directory of t.
func (c *Consumer) dir(t tp) string { return filepath.Join(c.cfg.StateDir, t.String()) }
