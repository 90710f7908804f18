// Package humanize formats quantities for people: byte sizes in IEC units
// ([Bytes]) and counts with SI suffixes ([Count]). The dedup command and
// the benchmark reports share it, so that one quantity reads the same
// everywhere.
package humanize

import "fmt"

// rung is one step of a scale: values from min up are divided by unit and
// printed with format.
type rung struct {
	min, unit float64
	format    string
}

// bytesScale is IEC: KiB with one decimal, MiB and GiB with two.
var bytesScale = []rung{
	{1 << 30, 1 << 30, "%.2f GiB"},
	{1 << 20, 1 << 20, "%.2f MiB"},
	{1 << 10, 1 << 10, "%.1f KiB"},
}

// countScale keeps about three significant digits: 1.5k, 123k, 4.56M,
// 12.3M, 1.23G, 45.6G.
var countScale = []rung{
	{10e9, 1e9, "%.1fG"},
	{1e9, 1e9, "%.2fG"},
	{10e6, 1e6, "%.1fM"},
	{1e6, 1e6, "%.2fM"},
	{100e3, 1e3, "%.0fk"},
	{1e3, 1e3, "%.1fk"},
}

// scaled formats n on the first rung of scale it reaches; ok is false
// when n is below them all.
func scaled(n float64, scale []rung) (s string, ok bool) {
	for _, r := range scale {
		if n >= r.min {
			return fmt.Sprintf(r.format, n/r.unit), true
		}
	}
	return "", false
}

// Bytes formats n bytes in IEC units: "512 B", "1.5 KiB", "3.25 MiB",
// "1.07 GiB".
func Bytes(n uint64) string {
	if s, ok := scaled(float64(n), bytesScale); ok {
		return s
	}
	return fmt.Sprintf("%d B", n)
}

// Count formats n with the suffixes k, M and G to about three significant
// digits ("1.5k", "123k", "4.56M", "12.3M"); below a thousand, a whole
// number as it is ("950") and another with two decimals ("0.25").
func Count(n float64) string {
	if s, ok := scaled(n, countScale); ok {
		return s
	}
	if n == float64(int64(n)) {
		return fmt.Sprintf("%d", int64(n))
	}
	return fmt.Sprintf("%.2f", n)
}
