package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/streamdedup/dedup/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaStartOffset parses --start-offset and refuses what it is not.
func TestKafkaStartOffset(t *testing.T) {
	for s, want := range map[string]kgo.Offset{
		"earliest":             kgo.NewOffset().AtStart(),
		"latest":               kgo.NewOffset().AtEnd(),
		"2026-01-02T03:04:05Z": kgo.NewOffset().AfterMilli(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()),
	} {
		got, err := parseStartOffset(s)
		if err != nil || got != want {
			t.Errorf("--start-offset %s: %v %v, want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "start", "2026-01-02", "-1"} {
		if _, err := parseStartOffset(s); err == nil || !strings.Contains(err.Error(), "--start-offset") {
			t.Errorf("--start-offset %q: %v, want an error naming the flag", s, err)
		}
	}
}

// TestKafkaTombstoneReason: a tombstone (null value) with --key is
// rejected for what it is, not as an empty line.
func TestKafkaTombstoneReason(t *testing.T) {
	fn, err := kafkaKeyFunc(&kafkaConfig{key: "event_id"}, engineDefaults)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fn(&kgo.Record{Key: []byte("k-tomb")})
	if !errors.Is(err, kafka.ErrNoKey) || !strings.Contains(err.Error(), "tombstone") {
		t.Errorf("tombstone: %v, want ErrNoKey saying tombstone", err)
	}
	if k, err := fn(&kgo.Record{Value: []byte(`{"event_id":"e1"}`)}); err != nil || !strings.Contains(string(k), "e1") {
		t.Errorf("event: %q %v", k, err)
	}
}

// startDevBroker runs `dedup kafka dev-broker` with args and returns its
// address.
func startDevBroker(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"kafka", "dev-broker", "--port", "0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dev-broker: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestKafkaDevBrokerTopics: --topics a,b creates two topics.
func TestKafkaDevBrokerTopics(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	addr := startDevBroker(t, bin, "--topics", "in,out", "--topics", "rejects", "--partitions", "2")
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := td.Names(); strings.Join(got, " ") != "in out rejects" {
		t.Errorf("topics %q, want in out rejects", got)
	}
	for _, d := range td {
		if len(d.Partitions) != 2 {
			t.Errorf("topic %s has %d partitions, want 2", d.Topic, len(d.Partitions))
		}
	}
}

// TestKafkaSystemdUnit runs the ExecStart line of deploy/dedup-kafka.service
// with the real binary (the environment file's values and the host name
// filled in, the state under a temporary directory, the metrics on a free
// port): its flags parse, it joins the group, and it stops on SIGTERM,
// exit 0. The Dockerfile beside it is not built here (no docker).
func TestKafkaSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join("..", "..", "deploy", "dedup-kafka.service"))
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.SplitSeq(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			line = v
		}
	}
	if line == "" {
		t.Fatal("no ExecStart in the unit")
	}
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	addrs := kafkaBroker(t, 2)
	line = strings.NewReplacer(
		"${BROKERS}", strings.Join(addrs, ","), "${GROUP}", "g", "${IN_TOPIC}", "in", "${OUT_TOPIC}", "out",
		"${REJECTS_TOPIC}", "rejects", "%H", "host1", "/var/lib/dedup", dir, "127.0.0.1:9464", "127.0.0.1:0",
	).Replace(line)
	args := strings.Fields(line)
	if args[0] != "/usr/local/bin/dedup" {
		t.Fatalf("ExecStart runs %s", args[0])
	}
	if strings.ContainsAny(line, "$%") {
		t.Fatalf("unfilled variables in %q", line)
	}
	cmd := exec.Command(bin, args[1:]...)
	stderr := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), " ready") {
		select {
		case err := <-done:
			t.Fatalf("exited: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no partition ready after 30s:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("still running 20s after SIGTERM:\n%s", stderr.String())
	}
}

// TestKafkaHealthEndpoints: /healthz answers while the process runs;
// /readyz and dedup_kafka_ready say not ready before the group is joined.
func TestKafkaHealthEndpoints(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
	}
	const every = 200 * time.Millisecond
	cons, err := kafka.New(kafka.Options{Brokers: []string{"127.0.0.1:1"}, Group: "g", Topic: "in", OutTopic: "out", StateDir: t.TempDir(),
		BrokerCheckInterval: every, ShutdownTimeout: time.Second, RetryBackoff: 10 * time.Millisecond, Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := newRegistry(newKafkaCollector(cons))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := serveKafkaMetrics(ln, reg, cons)
	defer stop()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "joining the group") {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "dedup_kafka_ready 0") {
		t.Errorf("/metrics has no dedup_kafka_ready 0:\n%s", body)
	}

	// Running without a reachable broker: /readyz says so with the
	// error, and the log says so once per check, not once per retry.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- cons.Run(ctx) }()
	var body string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, body = get("/readyz"); strings.Contains(body, "cannot reach the brokers: ") && strings.Contains(body, "127.0.0.1:1") {
			break
		}
	}
	time.Sleep(3 * every)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	if !strings.Contains(body, "cannot reach the brokers: ") || !strings.Contains(body, "127.0.0.1:1") {
		t.Errorf("/readyz without a broker: %q, want it to say it cannot reach the brokers, with the error", body)
	}
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, l := range logs {
		if strings.Contains(l, "cannot reach any broker") {
			n++
		}
	}
	if n < 2 || n > int(elapsed/every)+1 {
		t.Errorf("%d lines saying no broker is reachable in %v (checks every %v): %q", n, elapsed, every, logs)
	}
}

// TestKafkaFlagsZeroOrNegative: an explicit 0 or negative number is a
// usage error naming the flag, not the default in disguise.
func TestKafkaFlagsZeroOrNegative(t *testing.T) {
	base := []string{"kafka", "--brokers", "127.0.0.1:1", "--group", "g", "--topic", "t", "--out-topic", "o", "--state", t.TempDir()}
	for _, tc := range [][2]string{
		{"--txn-records", "0"}, {"--txn-records", "-5"},
		{"--txn-time", "0s"}, {"--txn-time", "-1s"},
		{"--engine-commit-interval", "0s"}, {"--session-timeout", "0s"},
		{"--rebalance-timeout", "-1s"}, {"--transaction-timeout", "0s"},
		{"--shutdown-timeout", "0s"}, {"--max-key", "0"},
	} {
		code, _, stderr := runCmd(t, "", append(append([]string{}, base...), tc[0], tc[1])...)
		if code != 2 || !strings.Contains(stderr, tc[0]+" ") {
			t.Errorf("%s %s: exit %d, stderr %q; want exit 2 naming %s", tc[0], tc[1], code, stderr, tc[0])
		}
	}
}

// TestKafkaMetricsLagBeforeFetch: a partition not fetched yet exports no
// lag (not -1); a fetched one exports its lag.
func TestKafkaMetricsLagBeforeFetch(t *testing.T) {
	lags := func(lag int64) int {
		ch := make(chan prometheus.Metric, 64)
		collectPartition(ch, kafka.PartitionState{Topic: "in", Partition: 3, Lag: lag})
		close(ch)
		n := 0
		for m := range ch {
			if m.Desc() == kafkaLagDesc {
				n++
			}
		}
		return n
	}
	if n := lags(-1); n != 0 {
		t.Errorf("a partition not fetched yet exports %d lag metrics, want none", n)
	}
	if n := lags(7); n != 1 {
		t.Errorf("a fetched partition exports %d lag metrics, want 1", n)
	}
}

// TestKafkaHelpUsageLines: the dev-broker usage line of `dedup kafka
// --help` is the one `dedup kafka dev-broker --help` starts with, flags
// and all.
func TestKafkaHelpUsageLines(t *testing.T) {
	_, out, errOut := runCmd(t, "", "kafka", "--help")
	_, dout, derrOut := runCmd(t, "", "kafka", "dev-broker", "--help")
	first, _, _ := strings.Cut(dout+derrOut, "\n")
	want := strings.TrimSpace(strings.TrimPrefix(first, "Usage:"))
	if !strings.HasPrefix(want, "dedup kafka dev-broker [") {
		t.Fatalf("dev-broker help begins %q", first)
	}
	for _, l := range strings.Split(out+errOut, "\n") {
		if strings.Contains(l, "dedup kafka dev-broker [") {
			if got := strings.TrimSpace(l); got != want {
				t.Errorf("dedup kafka --help: %q, want %q", got, want)
			}
			return
		}
	}
	t.Errorf("dedup kafka --help has no dev-broker usage line:\n%s", out+errOut)
}
