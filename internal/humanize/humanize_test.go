package humanize

import "testing"

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{1 << 20, "1.00 MiB"},
		{3<<20 + 1<<18, "3.25 MiB"},
		{1 << 30, "1.00 GiB"},
		{5 << 40, "5120.00 GiB"},
	} {
		if got := Bytes(c.n); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    float64
		want string
	}{
		{0, "0"},
		{950, "950"},
		{0.25, "0.25"},
		{999.5, "999.50"},
		{1000, "1.0k"},
		{1500, "1.5k"},
		{99_949, "99.9k"},
		{123_456, "123k"},
		{1_000_000, "1.00M"},
		{4_560_000, "4.56M"},
		{12_345_678, "12.3M"},
		{999_000_000, "999.0M"},
		{1_230_000_000, "1.23G"},
		{45_600_000_000, "45.6G"},
	} {
		if got := Count(c.n); got != c.want {
			t.Errorf("Count(%v) = %q, want %q", c.n, got, c.want)
		}
	}
}
