package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runFor starts a consumer with cfg and returns it with a channel that
// receives Run's error.
func runFor(t *testing.T, cfg Options) (*Consumer, context.CancelFunc, chan error) {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	return c, cancel, done
}

// waitRun waits up to within for Run's error.
func waitRun(t *testing.T, done chan error, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-done:
		done <- err // for the cleanup
		return err
	case <-time.After(within):
		t.Fatalf("%s: Run did not return within %v", what, within)
		return nil
	}
}

// groupMembers returns the members of group as the broker lists them.
func groupMembers(t *testing.T, addrs []string, group string) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	return len(gs[group].Members)
}

// TestShutdownWhileJoiningIsBounded joins a group that waits for a static
// member which died without leaving (its session timeout 20s): the join
// does not complete, and canceling Run must still return within
// ShutdownTimeout, not when the group gives up on the dead member.
func TestShutdownWhileJoiningIsBounded(t *testing.T) {
	t0 := time.Now()
	c := kafkatest.NewCluster(t, 2)
	addrs := c.ListenAddrs()
	group := "g-join"
	kafkatest.Produce(t, addrs, genInput("j", 20, 20, 0, time.Now()).recs...)
	kafkatest.AbandonStaticMember(t, addrs, group, 20*time.Second)
	t.Logf("dead member joined and closed at %v", time.Since(t0))

	cfg := testConfig(t, addrs, group)
	cfg.InstanceID = "alive"
	cfg.ShutdownTimeout = 2 * time.Second
	cons, stop, done := runFor(t, cfg)
	time.Sleep(1500 * time.Millisecond)
	if n := cons.Stats().Partitions; n != 0 {
		t.Fatalf("the join completed (%d partitions) though a static member is missing", n)
	}
	began := time.Now()
	stop()
	if err := waitRun(t, done, 15*time.Second, "joining"); err != nil {
		t.Errorf("Run: %v", err)
	}
	if took := time.Since(began); took > 4*time.Second {
		t.Errorf("Run returned %v after its cancel, ShutdownTimeout is 2s", took)
	}
	t.Logf("Run returned at %v", time.Since(t0))
}

// TestStaticMemberLeavesOnShutdown: a static member leaves the group when
// Run returns, so its partitions move at once instead of after the session
// timeout; with KeepStaticMembership it keeps its place.
func TestStaticMemberLeavesOnShutdown(t *testing.T) {
	for _, keep := range []bool{false, true} {
		name := "leave"
		if keep {
			name = "keep"
		}
		t.Run(name, func(t *testing.T) {
			c := kafkatest.NewCluster(t, 2)
			addrs := c.ListenAddrs()
			group := "g-static-" + name
			cfg := testConfig(t, addrs, group)
			cfg.InstanceID = "s1"
			cfg.SessionTimeout = 20 * time.Second
			cfg.KeepStaticMembership = keep
			r := start(t, cfg, nil)
			kafkatest.Produce(t, addrs, genInput("s", 50, 40, 0, time.Now()).recs...)
			waitReady(t, r, 2)
			kafkatest.WaitCommitted(t, addrs, group, nil)
			r.stop(t)
			want := 0
			if keep {
				want = 1
			}
			if n := groupMembers(t, addrs, group); n != want {
				t.Errorf("the group has %d members after Run returned, want %d", n, want)
			}
		})
	}
}

// TestFencedInstanceExits: a second instance with the same InstanceID
// takes the first one's place; the first one's Run returns ErrFenced
// instead of rejoining (and fencing the second) over and over.
func TestFencedInstanceExits(t *testing.T) {
	c := kafkatest.NewCluster(t, 2)
	addrs := c.ListenAddrs()
	group := "g-fenced"
	cfg := testConfig(t, addrs, group)
	cfg.InstanceID = "same"
	a := start(t, cfg, nil)
	kafkatest.Produce(t, addrs, genInput("f", 50, 40, 0, time.Now()).recs...)
	waitReady(t, a, 2)
	cfg2 := testConfig(t, addrs, group)
	cfg2.InstanceID = "same"
	_, _, bDone := runFor(t, cfg2)
	select {
	case <-a.exited:
		if !errors.Is(a.err, ErrFenced) {
			t.Fatalf("the fenced instance's Run returned %v, want ErrFenced", a.err)
		}
		t.Logf("fenced: %v", a.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the fenced instance still runs 20s after another took its instance ID")
	}
	select {
	case err := <-bDone:
		t.Fatalf("the instance that took the ID stopped: %v", err)
	default:
	}
}
