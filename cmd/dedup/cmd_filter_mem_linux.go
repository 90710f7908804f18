package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// releaseStartupPages unmaps from the process the pages of its own code and
// read-only data that the program's start touched, so that the resident set
// holds what the run uses rather than what package initialisation read.
//
// The binary links many packages (Pebble, the Kafka client, the S3 and GCS
// handover stores, gRPC, Prometheus) whose initialisation reads scattered
// bytes of the executable before main runs, and the kernel maps an
// executable whose page cache holds large folios in 2 MiB blocks: those
// reads leave most of the binary resident, about 44 MiB of `dedup filter`'s
// resident set before its first line (RssFile in /proc/PID/status). The
// advice is MADV_NOHUGEPAGE (later faults map 4 KiB pages) then
// MADV_DONTNEED (the mappings are dropped; the pages stay in the page cache
// and fault back in when they are executed or read, 64 KiB at a time). What
// the run uses comes back: the code it executes, and most of the function
// tables (.gopclntab), which the garbage collector reads for every function
// on a goroutine's stack; the rest, about 12-19 MiB, stays out.
//
// Only mappings of the executable that are not writable and hold no page of
// their own are advised: such a mapping shows the file as it is, so
// dropping it loses nothing. A read-only mapping with anonymous pages (the
// dynamic linker's relocations, made read-only afterwards; a debugger's
// breakpoints) is left alone. Errors are ignored: the advice only lowers
// the resident set.
func releaseStartupPages() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return
	}
	var start, end uint64
	candidate, released := false, false
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Bytes()
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := bytes.Cut(f[0], []byte("-")); ok && len(f) >= 5 {
			// A mapping's header: start-end perms offset dev inode [path].
			candidate = false
			s, err1 := strconv.ParseUint(string(lo), 16, 64)
			e, err2 := strconv.ParseUint(string(hi), 16, 64)
			if err1 == nil && err2 == nil && e > s && len(f) == 6 && string(f[5]) == exe &&
				(string(f[1]) == "r-xp" || string(f[1]) == "r--p") {
				start, end, candidate = s, e, true
			}
			continue
		}
		// The mapping's fields; Anonymous comes after Rss and the others
		// that say how much is resident.
		if candidate && string(f[0]) == "Anonymous:" && len(f) >= 2 {
			if string(f[1]) == "0" {
				madvise(uintptr(start), uintptr(end-start), syscall.MADV_NOHUGEPAGE)
				madvise(uintptr(start), uintptr(end-start), syscall.MADV_RANDOM)
				madvise(uintptr(start), uintptr(end-start), syscall.MADV_DONTNEED)
				released = true
			}
			candidate = false
		}
	}
	if released {
		evictExecutable(exe)
	}
}

// evictExecutable drops from the page cache the pages of the executable
// that no process maps. The page cache of a file written through a
// mapping (as the Go linker writes its output) or read ahead holds large
// folios, and the kernel maps a whole folio at a fault, up to 2 MiB for
// one instruction: measured, 35 MiB of the binary resident two seconds
// after dedup serve started, 12 MiB when the same bytes were written by
// cat. Evicted, the pages the run uses come back one at a time
// (MADV_RANDOM: no read-ahead), as small folios. Other processes running
// the same binary keep the pages they map. A binary just written (a
// build, an install) has dirty pages, which stay until written back: they
// are written first (fdatasync, which costs nothing once they are clean).
func evictExecutable(exe string) {
	f, err := os.Open(exe)
	if err != nil {
		return
	}
	_ = unix.Fdatasync(int(f.Fd()))
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	_ = f.Close()
}

func madvise(addr, n uintptr, advice int) {
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, addr, n, uintptr(advice))
}
