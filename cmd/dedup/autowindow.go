package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/streamdedup/dedup"
)

// autoWindowFlags are --window auto and the flags that shape the
// self-sizing window (dedup.AutoWindow): --max-leaks, --max-memory,
// --window-min, --window-max.
type autoWindowFlags struct {
	auto      bool
	maxLeaks  float64
	maxMemory byteSize
	min, max  time.Duration
}

// windowValue is --window: a duration, or "auto".
type windowValue struct {
	d    *time.Duration
	auto *bool
}

func (w windowValue) String() string {
	if w.auto != nil && *w.auto {
		return "auto"
	}
	if w.d == nil {
		return "0s"
	}
	return w.d.String()
}

func (w windowValue) Set(s string) error {
	if s == "auto" {
		*w.auto = true
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 5m, or auto, got %q", s)
	}
	*w.d, *w.auto = d, false
	return nil
}

// registerWindow defines --window (a duration, or auto) and the auto
// window's flags on fs.
func (f *engineFlags) registerWindow(fs *flag.FlagSet, d dedup.Options, usage string) {
	f.window = d.Window
	fs.Var(windowValue{&f.window, &f.autoWin.auto}, "window", usage+", or auto: sized from the delays measured to --max-leaks within --max-memory, between --window-min and --window-max, every change logged (see docs/window-auto.md)")
	fs.Float64Var(&f.autoWin.maxLeaks, "max-leaks", 100, "with --window auto: the duplicates per million events the window may let through, `N`")
	fs.Var(&f.autoWin.maxMemory, "max-memory", "with --window auto: the filters' memory at most, `SIZE` (bytes, or with KiB, MiB, GiB; default no bound)")
	fs.DurationVar(&f.autoWin.min, "window-min", 0, "with --window auto: the shortest window, `DURATION`, which cuts the generations (default "+d.Window.String()+")")
	fs.DurationVar(&f.autoWin.max, "window-max", 0, "with --window auto: the longest window, `DURATION` (default 8x --window-min)")
}

// autoOptions sets o's window from the flags: under --window auto,
// AutoWindow, and Window its Min.
func (f *engineFlags) autoOptions(o *dedup.Options) {
	if !f.autoWin.auto {
		return
	}
	o.Window = f.autoWin.min
	if o.Window == 0 {
		o.Window = engineDefaults.Window
	}
	o.AutoWindow = &dedup.AutoWindow{MaxLeaks: f.autoWin.maxLeaks, Min: o.Window, Max: f.autoWin.max,
		MaxMemory: int64(f.autoWin.maxMemory)}
}

// checkAuto is a usage error naming the auto window's flags given
// without --window auto (explicit, by flag name), nil if none.
func (f *engineFlags) checkAuto(explicit map[string]bool) error {
	if f.autoWin.auto {
		return nil
	}
	var msgs []string
	for _, fl := range []string{"max-leaks", "max-memory", "window-min", "window-max"} {
		if explicit[fl] {
			msgs = append(msgs, "--"+fl+": needs --window auto")
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return usagef("%s", strings.Join(msgs, "; "))
}
