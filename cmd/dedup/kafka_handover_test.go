package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// waitLines waits until c's log holds n lines containing s.
func waitLines(t *testing.T, c *kafkaChild, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(c.output(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("dedup kafka (%s) logged %q fewer than %d times in 60s:\n%s", c.id, s, n, c.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killOn waits until c's log holds one more line containing s than it did
// when called, then SIGKILLs c at once.
func killOn(t *testing.T, c *kafkaChild, s string, before int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(c.output(), s) <= before {
		if time.Now().After(deadline) {
			t.Fatalf("dedup kafka (%s) logged no new %q within 60s:\n%s", c.id, s, c.output())
		}
		time.Sleep(2 * time.Millisecond)
	}
	c.kill(t)
}

// TestKafkaHandoverKill9 runs real `dedup kafka --handover` processes over
// a shared directory and SIGKILLs them as they export a partition's state
// and as they import one: a partial export is never imported, a partial
// import leaves no state the next owner trusts, and the output holds every
// distinct key exactly once. The last owner, a new machine, imports.
func TestKafkaHandoverKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes and SIGKILL")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	addrs := kafkaBroker(t, 2)
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	ho := []string{"--handover", "file://" + filepath.ToSlash(store), "--handover-interval", "100ms"}
	root := filepath.Join(dir, "states")
	in := genKafkaInput(9000, 3)
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	q := len(in.recs) / 4
	send := func(recs []*kgo.Record) {
		t.Helper()
		if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var all []*kafkaChild
	dump := func() string {
		var b strings.Builder
		for _, c := range all {
			b.WriteString("--- " + c.id + ":\n" + c.output() + "\n")
		}
		return b.String()
	}
	run := func(id string) *kafkaChild {
		c := startKafka(t, bin, addrs, root, id, ho...)
		all = append(all, c)
		return c
	}

	a := run("a")
	send(in.recs[:q])
	waitLines(t, a, "in-0 exported at offset", 1)
	waitLines(t, a, "in-1 exported at offset", 1)
	n := strings.Count(a.output(), "exporting at offset")
	send(in.recs[q : 2*q])
	killOn(t, a, "exporting at offset", n) // during an export
	b := run("b")                          // no state: imports what a exported
	killOn(t, b, "importing the export", 0)
	c := run("c") // no state either
	kafkatest.WaitCommitted(t, addrs, "g", dump)
	// a may have committed every record before its kill, so the group can
	// be done before c has logged its imports: wait for them.
	waitLines(t, c, "imported the export", 2)
	if got := strings.Count(c.output(), "imported the export"); got != 2 {
		t.Errorf("c, with no state, imported %d partitions, want 2", got)
	}
	n = strings.Count(c.output(), "exporting at offset")
	send(in.recs[2*q : 3*q])
	killOn(t, c, "exporting at offset", n) // during an export, with records flowing
	a = run("a")                           // its own state, stale, and the scratch its kill left
	kafkatest.WaitCommitted(t, addrs, "g", dump)
	a.term(t)
	d := run("d") // a new machine
	send(in.recs[3*q:])
	kafkatest.WaitCommitted(t, addrs, "g", dump)
	d.term(t)
	checkKafkaOutput(t, addrs, in)
	if got := strings.Count(d.output(), "ready: committed"); got != 2 || strings.Count(d.output(), "imported the export") != 2 {
		t.Errorf("the last owner did not import both partitions")
	}
	if t.Failed() {
		t.Log(dump())
	}
}
