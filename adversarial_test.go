package dedup_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	. "github.com/streamdedup/dedup"

	"github.com/cespare/xxhash/v2"
	"github.com/streamdedup/dedup/internal/hashmix"
)

var advGenerate = flag.Bool("adversarial.generate", false, "regenerate testdata/adversarial_keys.txt (takes a few seconds)")

const advFile = "testdata/adversarial_keys.txt"

// advKeys is how many crafted keys the file holds.
const advKeys = 4000

// isAdversarial reports whether key is one an attacker would craft against
// an engine hashing with unseeded xxhash: its seed-0 hash falls into shard 0
// of 16 (the top 4 bits of the splitmix64 remix are zero) and its top 12
// bits are zero, so that in any blocked filter of up to 4096 blocks it lands
// in block 0 (the block is (h>>32)*nblocks>>32).
func isAdversarial(key []byte) bool {
	h := xxhash.Sum64(key)
	return h>>52 == 0 && hashmix.Splitmix64(h)>>60 == 0
}

// TestGenerateAdversarialKeys regenerates the crafted keys with
// -adversarial.generate: about 2^16 hashes per key.
func TestGenerateAdversarialKeys(t *testing.T) {
	if !*advGenerate {
		t.Skip("run with -adversarial.generate to regenerate " + advFile)
	}
	workers := runtime.NumCPU()
	var mu sync.Mutex
	var found [][]byte
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, 0, 32)
			for i := uint64(w); ; i += uint64(workers) {
				buf = strconv.AppendUint(append(buf[:0], "evt-"...), i, 36)
				if !isAdversarial(buf) {
					continue
				}
				mu.Lock()
				if len(found) >= advKeys {
					mu.Unlock()
					return
				}
				found = append(found, bytes.Clone(buf))
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	var out bytes.Buffer
	out.WriteString("# keys crafted against unseeded xxhash: see isAdversarial in reliability_adversarial_test.go\n")
	for _, k := range found {
		out.Write(k)
		out.WriteByte('\n')
	}
	if err := os.WriteFile(advFile, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadAdversarial(t *testing.T) [][]byte {
	f, err := os.Open(advFile)
	if err != nil {
		t.Fatalf("%v (regenerate with -run TestGenerateAdversarialKeys -adversarial.generate)", err)
	}
	defer f.Close()
	var keys [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Bytes(); len(line) > 0 && line[0] != '#' {
			if !isAdversarial(line) {
				t.Fatalf("%s: %q is not adversarial", advFile, line)
			}
			keys = append(keys, bytes.Clone(line))
		}
	}
	if len(keys) < 1000 {
		t.Fatalf("%s holds %d keys", advFile, len(keys))
	}
	return keys
}

// chi2Crit15 is the chi-square critical value for 15 degrees of freedom
// at p = 1e-4 (Wilson-Hilferty): a uniform spread fails once in 10^4 runs.
const chi2Crit15 = 44.6

// advProbe commits the first half of keys into e and observes the second
// half: it returns how many of those were reported as seen (probabilistic
// mode) or cost a false-positive store lookup (exact mode).
func advProbe(t *testing.T, e *Engine, keys [][]byte) (fps, probes int) {
	t.Helper()
	half := len(keys) / 2
	out := make([]Verdict, len(keys))
	if err := e.ObserveBatch(keys[:half], out); err != nil {
		t.Fatal(err)
	}
	if err := e.Commit(nil); err != nil {
		t.Fatal(err)
	}
	before := e.Stats().FalsePositives
	if err := e.ObserveBatch(keys[half:], out); err != nil {
		t.Fatal(err)
	}
	for _, v := range out[:len(keys)-half] {
		if v == Duplicate {
			fps++
		}
	}
	if !EngineOptions(e).Probabilistic {
		if fps != 0 {
			t.Fatalf("exact mode said Duplicate for %d keys never committed", fps)
		}
		fps = int(e.Stats().FalsePositives - before)
	}
	return fps, len(keys) - half
}

// TestAdversarialKeys: keys crafted so that their unseeded xxhash puts them
// all in one shard and one filter block do neither against the engine,
// whose hash is seeded per state directory: they spread evenly over the
// shards (chi-square) and meet the configured false-positive rate. A
// control engine whose seed is forced to 0 shows what they would do.
func TestAdversarialKeys(t *testing.T) {
	keys := loadAdversarial(t)
	const fpTarget = 0.01
	opts := func(prob bool) Options {
		// One generation holds every key (the clock does not move);
		// filters sized for about 130 keys per shard grow by chaining.
		return Options{Filter: "blocked", Shards: 16, Generations: 4, ExpectedRate: 133,
			FalsePositiveRate: fpTarget, Probabilistic: prob}
	}

	t.Run("control-unseeded", func(t *testing.T) {
		e := openT(t, opts(true))
		SetSeed(e, 0) // what an unseeded engine would do (fresh, nothing persisted)
		for _, k := range keys {
			if s := ShardOfKey(e, k); s != 0 {
				t.Fatalf("control: key %q in shard %d", k, s)
			}
		}
		fps, probes := advProbe(t, e, keys)
		t.Logf("unseeded: every key in shard 0; %d of %d probes false positive (%.1f%%)", fps, probes, 100*float64(fps)/float64(probes))
		if float64(fps) < 0.5*float64(probes) {
			t.Fatalf("control: only %d of %d false positives: the keys are not adversarial", fps, probes)
		}
	})

	for _, prob := range []bool{false, true} {
		t.Run(fmt.Sprintf("seeded/prob=%v", prob), func(t *testing.T) {
			o := opts(prob)
			o.Dir = t.TempDir()
			e := openT(t, o)
			var counts [16]float64
			for _, k := range keys {
				counts[ShardOfKey(e, k)]++
			}
			exp := float64(len(keys)) / 16
			var chi2 float64
			for _, c := range counts {
				chi2 += (c - exp) * (c - exp) / exp
			}
			if chi2 > chi2Crit15 {
				t.Fatalf("shards not uniform: chi-square %.1f > %.1f, counts %v", chi2, chi2Crit15, counts)
			}
			fps, probes := advProbe(t, e, keys)
			rate := float64(fps) / float64(probes)
			bound := fpTarget + 4*math.Sqrt(fpTarget*(1-fpTarget)/float64(probes))
			t.Logf("seeded: shard chi-square %.1f (15 df); %d of %d probes false positive (%.2f%%, bound %.2f%%)",
				chi2, fps, probes, 100*rate, 100*bound)
			if rate > bound {
				t.Fatalf("false-positive rate %.4f over its bound %.4f", rate, bound)
			}
		})
	}
}
