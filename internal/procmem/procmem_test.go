package procmem

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// touch allocates n bytes and writes a byte of every page, so that they
// are resident.
func touch(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	return b
}

// TestReadGrowsWithTouchedMemory reads this process's resident set and
// checks that it grows with memory touched, by pid as by 0.
func TestReadGrowsWithTouchedMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		_, err := Read(0)
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Read outside Linux: %v, want ErrUnsupported", err)
		}
		t.Skip("process memory is read from Linux's /proc")
	}
	m0, err := Read(0)
	if err != nil {
		t.Fatal(err)
	}
	b := touch(64 << 20)
	m1, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(b)
	if m1.RSS < m0.RSS+48<<20 || m1.Peak < m1.RSS {
		t.Errorf("RSS %d -> %d after touching 64 MiB, peak %d", m0.RSS, m1.RSS, m1.Peak)
	}
}

// TestResetPeakDropsToNow touches memory, lets the Go runtime return it,
// and checks that after ResetPeak the peak is no longer that of the
// touched memory.
func TestResetPeakDropsToNow(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the peak is reset through Linux's /proc")
	}
	b := touch(96 << 20)
	runtime.KeepAlive(b)
	before, err := Read(0)
	if err != nil {
		t.Fatal(err)
	}
	b = nil
	debug.FreeOSMemory()
	if err := ResetPeak(); err != nil {
		t.Fatal(err)
	}
	after, err := Read(0)
	if err != nil {
		t.Fatal(err)
	}
	if after.Peak < after.RSS {
		t.Errorf("peak %d below RSS %d after reset", after.Peak, after.RSS)
	}
	if before.Peak < after.RSS+64<<20 {
		t.Skipf("the runtime kept the touched memory: RSS %d, peak before %d", after.RSS, before.Peak)
	}
	if after.Peak > before.Peak-48<<20 {
		t.Errorf("peak %d after reset, %d before it, RSS now %d", after.Peak, before.Peak, after.RSS)
	}
}

// TestParseStatusRejectsBadFields names the field that is not a size in
// kB, and a file that lacks one of the two.
func TestParseStatusRejectsBadFields(t *testing.T) {
	good := "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t4\n"
	m, err := parseStatus("status", []byte(good))
	if err != nil || m.RSS != 1<<20 || m.Peak != 2<<20 {
		t.Fatalf("parse %q: %+v, %v; want RSS 1 MiB, peak 2 MiB", good, m, err)
	}
	for _, tc := range []struct{ text, want string }{
		{"VmHWM:\t2048 kB\nVmRSS:\t1024 pages\n", "VmRSS"},
		{"VmHWM:\tlots kB\nVmRSS:\t1024 kB\n", "VmHWM"},
		{"VmRSS:\t1024 kB\n", "no VmRSS and VmHWM"},
		{"", "no VmRSS and VmHWM"},
	} {
		_, err := parseStatus("status", []byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse %q: %v, want an error naming %s", tc.text, err, tc.want)
		}
	}
}

// TestChildPeakSeesTouchedMemory runs this test binary as a child that
// touches 64 MiB and checks that its peak says so.
func TestChildPeakSeesTouchedMemory(t *testing.T) {
	if os.Getenv("DEDUP_PROCMEM_TOUCH_CHILD") == "1" {
		runtime.KeepAlive(touch(64 << 20))
		return
	}
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("the child's peak is measured where ru_maxrss is")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildPeakSeesTouchedMemory$")
	cmd.Env = append(os.Environ(), "DEDUP_PROCMEM_TOUCH_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if p := ChildPeak(cmd.ProcessState); p < 64<<20 {
		t.Errorf("child touched 64 MiB, peak %d", p)
	}
}
