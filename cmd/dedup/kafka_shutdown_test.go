package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaSigtermWhileJoining: a `dedup kafka` process joining a group
// that waits for a static member killed without leaving (its session
// timeout 30s) gets SIGTERM before anything is assigned to it; it exits 0
// within its --shutdown-timeout, not when the group gives up on the dead
// member.
func TestKafkaSigtermWhileJoining(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	addrs := kafkaBroker(t, 2)
	kafkatest.Produce(t, addrs, &kgo.Record{Topic: "in", Value: []byte(`{"event_id":"x"}`)})
	kafkatest.AbandonStaticMember(t, addrs, "g", 30*time.Second)

	c := startKafka(t, bin, addrs, dir, "alive", "--shutdown-timeout", "2s")
	time.Sleep(1500 * time.Millisecond)
	if strings.Contains(c.output(), " ready") {
		t.Fatalf("a partition became ready though the group waits for a dead member:\n%s", c.output())
	}
	began := time.Now()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		c.done <- nil
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, c.output())
		}
		if took := time.Since(began); took > 4*time.Second {
			t.Errorf("exited %v after SIGTERM, --shutdown-timeout 2s\n%s", took, c.output())
		}
	case <-time.After(25 * time.Second):
		t.Fatalf("still running 25s after SIGTERM\n%s", c.output())
	}
}

// TestKafkaFencedExits: a second process started with the same
// --instance-id fences the first, which exits 1 with an error saying so
// instead of rejoining (and fencing the second) every few seconds.
func TestKafkaFencedExits(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	addrs := kafkaBroker(t, 2)
	a := startKafka(t, bin, addrs, filepath.Join(dir, "m1"), "same")
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(a.output(), " ready") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30s:\n%s", a.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := startKafka(t, bin, addrs, filepath.Join(dir, "m2"), "same")
	select {
	case err := <-a.done:
		a.done <- nil
		if err == nil || !strings.Contains(a.output(), "fenced") || !strings.Contains(a.output(), `"same"`) {
			t.Errorf("the fenced process exited with %v; want exit status 1 and an error naming the instance ID:\n%s", err, a.output())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the fenced process still runs 20s after another took its instance ID:\n%s", a.output())
	}
	b.term(t)
}
