package dedup_test

import (
	"errors"
	"testing"
	"time"

	. "github.com/streamdedup/dedup"
)

// TestFilterCeiling: the ceiling grows with ExpectedRate, and bad options
// are refused by name rather than given a size.
func TestFilterCeiling(t *testing.T) {
	small, err := Options{Window: time.Hour, ExpectedRate: 100}.FilterCeiling()
	if err != nil || small == 0 {
		t.Fatalf("FilterCeiling = %d, %v", small, err)
	}
	big, err := Options{Window: time.Hour, ExpectedRate: 10000}.FilterCeiling()
	if err != nil || big < 50*small {
		t.Fatalf("FilterCeiling at 100x the rate = %d, %v; at 1x %d", big, err, small)
	}
	if _, err := (Options{Window: time.Hour, FalsePositiveRate: 2}).FilterCeiling(); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("FalsePositiveRate 2: err = %v, want ErrInvalidOptions", err)
	}
}
