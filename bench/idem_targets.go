package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/internal/diskuse"
)

// startDedupProxy runs `dedup proxy` as a child process in front of up.
func startDedupProxy(ctx context.Context, cfg IdemConfig, bin string, up *upstream) (*idemTarget, func(), error) {
	state, err := os.MkdirTemp(cfg.Dir, "dedupbench-proxy-")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return startIdemProcess(ctx, "dedup proxy", []string{bin, "proxy", "--listen", "127.0.0.1:0", "--upstream", up.url, "--state", state,
		"--window", "24h", "--lease", "30s"}, state)
}

// startSharedProxies runs one `dedup serve` and n `dedup proxy` on it
// (--store, a table of their own), as one target: the clients spread over
// the proxies as a round-robin balancer would; its CPU is the processes'
// sum, its memory and disk the serve's.
func startSharedProxies(ctx context.Context, cfg IdemConfig, bin string, up *upstream, n int) (*idemTarget, func(), error) {
	state, err := os.MkdirTemp(cfg.Dir, "dedupbench-serve-")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	serve, stopServe, err := startIdemProcess(ctx, "dedup serve", []string{bin, "serve", "--listen", "127.0.0.1:0", "--state", state, "--window", "24h"}, state)
	if err != nil {
		return nil, nil, err
	}
	stops := []func(){stopServe}
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	store := "redis://" + strings.TrimPrefix(serve.url, "http://")
	name := fmt.Sprintf("%d dedup proxies, one dedup serve", n)
	procs := []*idemTarget{serve}
	var urls []string
	for i := 0; i < n; i++ {
		p, stopP, err := startIdemProcess(ctx, name, []string{bin, "proxy", "--listen", "127.0.0.1:0", "--upstream", up.url,
			"--store", store, "--table", "idem", "--lease", "30s"}, "")
		if err != nil {
			stop()
			return nil, nil, err
		}
		stops = append(stops, stopP)
		procs = append(procs, p)
		urls = append(urls, p.url)
	}
	t := &idemTarget{name: name, url: strings.Join(urls, ","), memory: serve.memory,
		diag: func() string {
			for _, p := range procs {
				if d := p.diag(); d != "" {
					return d
				}
			}
			return ""
		},
		cpu: func() (time.Duration, error) {
			var sum time.Duration
			for _, p := range procs {
				d, err := p.cpu()
				if err != nil {
					return 0, err
				}
				sum += d
			}
			return sum, nil
		},
	}
	return t, stop, nil
}

// startOwnTarget runs the target cfg.TargetCmd serves with flags, in a
// process of its own.
func startOwnTarget(ctx context.Context, cfg IdemConfig, name string, flags ...string) (*idemTarget, func(), error) {
	argv := append(append([]string(nil), cfg.TargetCmd...), flags...)
	return startIdemProcess(ctx, name, argv, "")
}

// The targets cfg.TargetCmd serves.
const (
	memoryTarget   = "in-memory middleware"
	constantTarget = "net/http, constant replay"
)

// startIdemProcess runs argv, a target that says "listening on ADDR" on
// its stderr, and measures its CPU, its resident set and the size of its
// state directory state ("": none). Stopping it kills it and removes
// state.
func startIdemProcess(ctx context.Context, name string, argv []string, state string) (*idemTarget, func(), error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	tail := &tailBuffer{max: 4 << 10}
	exited := make(chan struct{})
	var waitErr error
	cleanup := func() {
		if state != "" {
			os.RemoveAll(state)
		}
	}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	if err := cmd.Start(); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	r := bufio.NewReader(pipe)
	addr := ""
	for addr == "" {
		line, err := r.ReadString('\n')
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			cleanup()
			return nil, nil, fmt.Errorf("bench: %s did not start: %v (%s)", name, err, line)
		}
		if _, rest, ok := strings.Cut(line, "listening on "); ok {
			addr, _, _ = strings.Cut(rest, " ")
		}
	}
	go func() {
		// The target's stderr is kept (its end) to explain a target that
		// dies during the run.
		io.Copy(tail, r)
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		cmd.Process.Kill()
		<-exited
		cleanup()
	}
	pid := cmd.Process.Pid
	t := &idemTarget{name: name, url: "http://" + strings.TrimSpace(addr),
		diag: func() string {
			select {
			case <-exited:
				return fmt.Sprintf("%s exited (%v); its stderr ends:\n%s", name, waitErr, tail.String())
			case <-time.After(100 * time.Millisecond):
				return ""
			}
		},
		memory: func() (uint64, uint64, error) {
			rss, err := procRSS(pid)
			if err != nil || state == "" {
				return rss, 0, err
			}
			disk, err := diskuse.Bytes(vfs.Default, state)
			if err != nil {
				return 0, 0, fmt.Errorf("bench: du %s: %w", state, err)
			}
			return rss, disk, nil
		},
		cpu: func() (time.Duration, error) { return procCPU(pid) },
	}
	return t, stop, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// procCPU reads the CPU time (user and system) a process has used from
// /proc.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: CPU time: %w", err)
	}
	// The fields after the command name (which may hold spaces), from
	// field 3: utime and stime are fields 14 and 15, in clock ticks.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("bench: CPU time: unreadable /proc/%d/stat", pid)
	}
	var ticks uint64
	for _, x := range f[11:13] {
		n, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: CPU time: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ), 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procRSS reads a process's resident set size from /proc.
func procRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: RSS: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("bench: no VmRSS in /proc status")
}
