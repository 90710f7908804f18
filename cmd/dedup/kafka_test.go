package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/streamdedup/dedup/kafka"
	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaBroker starts an in-process kfake broker on 127.0.0.1 with the
// topics the tests use, and returns its address.
func kafkaBroker(t *testing.T, partitions int32) []string {
	return kafkatest.NewCluster(t, partitions).ListenAddrs()
}

// kafkaChild is a `dedup kafka` child process.
type kafkaChild struct {
	cmd    *exec.Cmd
	id     string
	stderr *bytes.Buffer
	done   chan error
}

// startKafka runs `dedup kafka` as instance id, with its own state
// directory under root (one per instance: another id is another machine).
func startKafka(t *testing.T, bin string, addrs []string, root, id string, extra ...string) *kafkaChild {
	t.Helper()
	args := []string{"kafka", "--brokers", strings.Join(addrs, ","), "--group", "g",
		"--topic", "in", "--out-topic", "out", "--rejects-topic", "rejects", "--dups-topic", "dups",
		"--state", filepath.Join(root, id), "--instance-id", id,
		"--key", "event_id",
		"--session-timeout", "2s", "--rebalance-timeout", "3s", "--transaction-timeout", "3s",
		"--txn-records", "300", "--txn-time", "50ms", "--engine-commit-interval", "200ms"}
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.Env = append(os.Environ(), "DEDUP_KAFKA_LOG="+os.Getenv("DEDUP_TEST_KAFKA_LOG"))
	c := &kafkaChild{cmd: cmd, id: id, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = &lockedWriter{w: c.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	// It handles signals once it has said what it runs.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(c.output(), "dedup kafka: group") {
		if time.Now().After(deadline) {
			t.Fatalf("dedup kafka (%s) did not start:\n%s", id, c.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

func (c *kafkaChild) output() string {
	l := c.cmd.Stderr.(*lockedWriter)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (c *kafkaChild) kill(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	c.done <- nil // for the cleanup
}

func (c *kafkaChild) term(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		c.done <- nil
		if err != nil {
			t.Errorf("dedup kafka (%s) after SIGTERM: %v\n%s", c.id, err, c.output())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("dedup kafka (%s) did not exit within 60s of SIGTERM\n%s", c.id, c.output())
	}
}

// kafkaInput is NDJSON events keyed by event_id with repeats, a few bad
// lines, and what the output topics must hold.
type kafkaInput struct {
	recs     []*kgo.Record
	distinct map[string]bool
	rejects  int
	dups     int
}

func genKafkaInput(n int, seed uint64) *kafkaInput {
	r := rand.New(rand.NewPCG(seed, 7))
	in := &kafkaInput{distinct: map[string]bool{}}
	next := 0
	t0 := time.Now()
	for i := range n {
		var v string
		var key string
		switch x := r.Float64(); {
		case x < 0.01:
			v = fmt.Sprintf(`{"event_id":"broken-%d"`, i)
			in.rejects++
		case x < 0.35 && next > 0:
			key = fmt.Sprintf("ev-%06d", next-1-r.IntN(min(next, 2000)))
		default:
			key = fmt.Sprintf("ev-%06d", next)
			next++
		}
		if key != "" {
			v = fmt.Sprintf(`{"event_id":%q,"attempt":%d}`, key, i)
			if in.distinct[key] {
				in.dups++
			}
			in.distinct[key] = true
		}
		// The record key is the dedup key (partitioning by it); the
		// consumer reads it from the value with --key event_id.
		in.recs = append(in.recs, &kgo.Record{Topic: "in", Key: []byte(key), Value: []byte(v), Timestamp: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	return in
}

// checkKafkaOutput checks the output topics against in: out holds every
// distinct key exactly once and nothing else; rejects and dups hold the
// rest.
func checkKafkaOutput(t *testing.T, addrs []string, in *kafkaInput) {
	t.Helper()
	kafkatest.CheckExactlyOnce(t, addrs, in.distinct, in.rejects, in.dups)
}

// TestKafkaKill9 runs real `dedup kafka` processes, two at a time, against
// an in-process broker while the input arrives, and SIGKILLs one at a
// random moment in each of 12 rounds, restarting it as the same instance
// or as another (another machine, with no state), so that partitions move
// and states go stale; then all three instances run to the end. Kills land before, during and after transactions,
// between a transaction's commit and the engines'. The output topic, read
// with read_committed, must hold every distinct key exactly once.
func TestKafkaKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes and SIGKILL rounds")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	addrs := kafkaBroker(t, 4)
	in := genKafkaInput(12000, 1)
	root := filepath.Join(dir, "states")

	ids := []string{"a", "b", "c"}
	running := []*kafkaChild{startKafka(t, bin, addrs, root, "a"), startKafka(t, bin, addrs, root, "b")}
	all := append([]*kafkaChild(nil), running...)
	dump := func() string {
		var b strings.Builder
		for i, c := range all {
			fmt.Fprintf(&b, "--- %d: %s:\n%s\n", i, c.id, c.output())
		}
		return b.String()
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	rng := rand.New(rand.NewPCG(2, 3))
	const rounds = 12
	per := len(in.recs) / rounds
	for round := range rounds {
		// The input arrives while the children run.
		batch := in.recs[round*per : min(len(in.recs), (round+1)*per)]
		if round == rounds-1 {
			batch = in.recs[round*per:]
		}
		if err := prod.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(300+rng.IntN(2200)) * time.Millisecond)
		i := rng.IntN(len(running))
		victim := running[i]
		victim.kill(t)
		next := victim.id
		if rng.IntN(3) == 0 {
			// Another machine: an id not running now, with its own state.
			for _, id := range ids {
				if id != running[0].id && id != running[1].id {
					next = id
				}
			}
		}
		t.Logf("round %d: killed %s, restarting as %s", round, victim.id, next)
		running[i] = startKafka(t, bin, addrs, root, next)
		all = append(all, running[i])
	}
	// The third id joins too. kfake (unlike Kafka) may never expire a
	// static member that was killed between its JoinGroup and SyncGroup,
	// leaving its partitions assigned to a dead process; a live member
	// with that id replaces it, as a restarted machine would.
	for _, id := range ids {
		if id != running[0].id && id != running[1].id {
			running = append(running, startKafka(t, bin, addrs, root, id))
			all = append(all, running[2])
		}
	}
	kafkatest.WaitCommitted(t, addrs, "g", dump)
	for _, c := range running {
		c.term(t)
	}
	checkKafkaOutput(t, addrs, in)
	if t.Failed() {
		t.Log(dump())
	}
}

// TestKafkaKcat drives `dedup kafka` with a non-Go client: kcat
// (librdkafka) produces the input and consumes the output, with
// read_committed, from a broker on 127.0.0.1.
func TestKafkaKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed (Debian package kcat)")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	addrs := kafkaBroker(t, 3)
	broker := addrs[0]

	// key:value lines, with repeats and one keyless record.
	var input bytes.Buffer
	want := map[string]bool{}
	for i := range 600 {
		k := fmt.Sprintf("k%04d", (i*37)%250)
		want[k] = true
		fmt.Fprintf(&input, "%s:{\"n\":%d}\n", k, i)
	}
	input.WriteString(":keyless\n")
	produce := exec.Command(kcat, "-P", "-b", broker, "-t", "in", "-K:")
	produce.Stdin = &input
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}

	c := startKafka(t, bin, addrs, dir, "k", "--key-from", "record-key", "--key", "")
	kafkatest.WaitCommitted(t, addrs, "g", c.output)
	c.term(t)

	consume := exec.Command(kcat, "-C", "-b", broker, "-t", "out", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%k\n")
	out, err := consume.Output()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, out)
	}
	got := map[string]int{}
	for _, k := range strings.Fields(string(out)) {
		got[k]++
	}
	for k := range want {
		if got[k] != 1 {
			t.Errorf("kcat read %q %d times from out, want once", k, got[k])
		}
	}
	if len(got) != len(want) {
		t.Errorf("kcat read %d distinct keys, want %d", len(got), len(want))
	}
	rej, err := exec.Command(kcat, "-C", "-b", broker, "-t", "rejects", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%s|%h\n").Output()
	if err != nil {
		t.Fatalf("kcat -C rejects: %v", err)
	}
	if !strings.Contains(string(rej), "keyless|dedup-reject-reason=") {
		t.Errorf("rejects topic, read by kcat: %q, want the keyless record with its reason header", rej)
	}
	if want := "dedup kafka: 601 records, 250 new, 350 duplicates, 1 rejected; "; !strings.Contains(c.output(), want) {
		t.Errorf("exit summary lacks %q", want)
	}
	if t.Failed() {
		t.Log(c.output())
	}
	_ = os.Remove(bin)
}

// TestKafkaSummaryCountsAbortedOnce: after SIGTERM the summary read "12
// records, 5 new, 6 duplicates, 1 rejected; 2 transactions committed, 1
// aborted" for 9 records: an aborted transaction's records were counted,
// then counted again when decided anew. It now gives the committed
// transactions' figures and says how many records the aborted ones held.
func TestKafkaSummaryCountsAbortedOnce(t *testing.T) {
	st := kafka.Stats{Records: 12, CommittedRecords: 9, New: 4, Duplicates: 4, Rejected: 1, Committed: 2, Aborted: 1}
	want := "dedup kafka: 9 records, 4 new, 4 duplicates, 1 rejected; 2 transactions committed, 1 aborted (their 3 records not counted); 0 records replayed"
	if got := kafkaSummary(st); got != want {
		t.Errorf("summary\n%s\nwant\n%s", got, want)
	}
	st = kafka.Stats{Records: 9, CommittedRecords: 9, New: 4, Duplicates: 4, Rejected: 1, Committed: 2}
	want = "dedup kafka: 9 records, 4 new, 4 duplicates, 1 rejected; 2 transactions committed, 0 aborted; 0 records replayed"
	if got := kafkaSummary(st); got != want {
		t.Errorf("summary\n%s\nwant\n%s", got, want)
	}
}
