// Package kafkatest runs an in-process Kafka broker (franz-go's kfake) on
// 127.0.0.1 and reads its topics, for tests of
// [github.com/streamdedup/dedup/kafka] consumers and of `dedup kafka`
// processes.
//
// Expected usage: [NewCluster] starts a broker holding the topics [In],
// [Out], [Rejects] and [Dups]; the test produces into [In], runs
// consumers in group g, waits with [WaitCommitted] until g has processed
// the whole input, and checks the output topics with [CheckExactlyOnce].
// Every helper fails the test (t.Fatal) when the broker does not answer.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The topics every [NewCluster] broker holds.
const (
	In      = "in"      // the input
	Out     = "out"     // each distinct key once
	Rejects = "rejects" // records without a usable key
	Dups    = "dups"    // the duplicates
)

// committedWithin bounds [WaitCommitted].
const committedWithin = 90 * time.Second

// NewCluster starts a one-broker kfake cluster holding [In], [Out],
// [Rejects] and [Dups], partitions partitions each, with a group minimum
// session timeout of one second; opts add to these (SASL, TLS). The
// cluster closes when t ends.
func NewCluster(t testing.TB, partitions int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, In, Out, Rejects, Dups),
		kfake.GroupMinSessionTimeout(time.Second),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// client returns a client of addrs with opts; the caller closes it.
func client(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// Produce writes recs (each naming its topic) and waits for their acks.
func Produce(t testing.TB, addrs []string, recs ...*kgo.Record) {
	t.Helper()
	cl := client(t, addrs)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// ReadCommitted returns a client reading topic from its start with
// read_committed; the caller closes it.
func ReadCommitted(t testing.TB, addrs []string, topic string) *kgo.Client {
	t.Helper()
	return client(t, addrs,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
}

// firstPoll bounds [ReadAll]'s first poll of a topic that holds records:
// on a loaded machine the client's first fetch can take longer than idle.
const firstPoll = 15 * time.Second

// ReadAll reads topic with read_committed from its start until a poll of
// idle brings nothing, and returns the records and their counts by key
// (by value for a keyless record). When the topic holds records, the first
// poll waits up to 15 seconds for them.
func ReadAll(t testing.TB, addrs []string, topic string, idle time.Duration) (map[string]int, []*kgo.Record) {
	t.Helper()
	cl := ReadCommitted(t, addrs, topic)
	defer cl.Close()
	counts := map[string]int{}
	var all []*kgo.Record
	wait := idle
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	cancel()
	if err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			wait = max(idle, firstPoll)
		}
	})
	for {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		fs := cl.PollFetches(ctx)
		cancel()
		wait = idle
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			k := string(r.Key)
			if k == "" {
				k = string(r.Value)
			}
			counts[k]++
			all = append(all, r)
		})
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("read %s: %v", topic, err)
			}
		})
		if n == 0 {
			return counts, all
		}
	}
}

// WaitCommitted waits until group has committed the end offset of every
// partition of [In] that holds records: the whole input is processed. After
// 90 seconds it fails the test with the group's members and offsets, and
// with more() when more is not nil (the consumers' logs).
func WaitCommitted(t testing.TB, addrs []string, group string, more func() string) {
	t.Helper()
	cl := client(t, addrs)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(committedWithin)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ends, err1 := adm.ListEndOffsets(ctx, In)
		offs, err2 := adm.FetchOffsets(ctx, group)
		cancel()
		behind := -1
		if err1 == nil && err2 == nil {
			behind = 0
			ends.Each(func(o kadm.ListedOffset) {
				if c, ok := offs.Lookup(In, o.Partition); o.Offset > 0 && (!ok || c.At < o.Offset) {
					behind++
				}
			})
			if behind == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			var desc strings.Builder
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if gs, err := adm.DescribeGroups(ctx, group); err == nil {
				for _, g := range gs {
					fmt.Fprintf(&desc, "group %s state %s protocol %s\n", g.Group, g.State, g.Protocol)
					for _, m := range g.Members {
						ca, _ := m.Assigned.AsConsumer()
						fmt.Fprintf(&desc, "  member %s instance %v: %v\n", m.MemberID, m.InstanceID, ca)
					}
				}
			}
			cancel()
			fmt.Fprintf(&desc, "ends %v\ncommitted %v\n", ends, offs)
			if more != nil {
				desc.WriteString(more())
			}
			t.Fatalf("group %s has not committed the end of %s after %v (%d partitions behind; %v %v)\n%s",
				group, In, committedWithin, behind, err1, err2, desc.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// AbandonStaticMember joins group as the static member "dead" (session and
// rebalance timeouts session), consumes a record of [In] (the caller has
// produced one), and closes the client without leaving the group, as a
// process killed with SIGKILL would: the group then waits up to session
// for it before a rebalance completes.
func AbandonStaticMember(t testing.TB, addrs []string, group string, session time.Duration) {
	t.Helper()
	dead, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(In),
		kgo.InstanceID("dead"), kgo.SessionTimeout(session), kgo.RebalanceTimeout(session),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	for dead.PollFetches(ctx).NumRecords() == 0 && ctx.Err() == nil {
	}
	cancel()
	dead.Close() // a static member stays in the group on Close
}

// CheckExactlyOnce reads the output topics to their end and checks that
// [Out] holds each key of distinct exactly once and nothing else, that
// [Rejects] holds rejects records and that [Dups] holds dups records.
func CheckExactlyOnce(t testing.TB, addrs []string, distinct map[string]bool, rejects, dups int) {
	t.Helper()
	out, _ := ReadAll(t, addrs, Out, time.Second)
	bad := 0
	for k, n := range out {
		if !distinct[k] || n != 1 {
			if bad < 10 {
				t.Errorf("%s holds key %q %d times (in the input: %v)", Out, k, n, distinct[k])
			}
			bad++
		}
	}
	for k := range distinct {
		if out[k] == 0 {
			if bad < 10 {
				t.Errorf("%s misses key %q", Out, k)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d keys wrong in %s (%d distinct in the input, %d keys in %s)", bad, Out, len(distinct), len(out), Out)
	}
	rej, _ := ReadAll(t, addrs, Rejects, time.Second)
	if got := Sum(rej); got != rejects {
		t.Errorf("%s holds %d records, want %d", Rejects, got, rejects)
	}
	dup, _ := ReadAll(t, addrs, Dups, time.Second)
	if got := Sum(dup); got != dups {
		t.Errorf("%s holds %d records, want %d", Dups, got, dups)
	}
}

// Sum returns the sum of the counts in m.
func Sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
