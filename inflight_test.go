package dedup

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestInflightSetModel checks the open-addressing in-flight set against a
// map over random adds, lookups and removals, with hashes drawn from a
// small range so that probe runs overlap, wrap around the table and are cut
// by removals, with keys sharing a hash (exact mode) and with hash 0.
func TestInflightSetModel(t *testing.T) {
	for _, exactMode := range []bool{true, false} {
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("exact=%v/seed=%d", exactMode, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 7))
				type k struct {
					h   uint64
					key string
				}
				model := map[k]uint64{} // key -> gen
				heldHash := map[uint64]int{}
				p := newInflightSet(r.IntN(100))
				// Hashes share their slot bits often: few distinct values
				// in bits 20.., and 0 now and then.
				draw := func() k {
					h := uint64(r.IntN(300)) << 20
					if r.IntN(50) == 0 {
						h = 0
					}
					key := fmt.Sprint(r.IntN(3)) // up to 3 keys per hash
					if !exactMode {
						key = ""
					}
					return k{h, key}
				}
				for op := range 20000 {
					x := draw()
					_, want := model[x]
					if !exactMode {
						want = heldHash[x.h] > 0
					}
					if got := p.has(x.h, []byte(x.key), exactMode); got != want {
						t.Fatalf("op %d: has(%#x, %q) = %v, want %v", op, x.h, x.key, got, want)
					}
					switch r.IntN(3) {
					case 0, 1:
						if !want {
							gen := uint64(r.IntN(5))
							p.add(x.h, []byte(x.key), gen, exactMode)
							model[x] = gen
							heldHash[x.h]++
						}
					case 2:
						gen, ok := p.remove(x.h, []byte(x.key), exactMode)
						if ok != want {
							t.Fatalf("op %d: remove(%#x, %q) ok = %v, want %v", op, x.h, x.key, ok, want)
						}
						if ok {
							if exactMode && gen != model[x] {
								t.Fatalf("op %d: remove(%#x, %q) gen %d, want %d", op, x.h, x.key, gen, model[x])
							}
							if !exactMode {
								// Any key of that hash: the model drops one of them.
								for mk := range model {
									if mk.h == x.h && model[mk] == gen {
										x = mk
										break
									}
								}
							}
							delete(model, x)
							heldHash[x.h]--
						}
					}
					if p.n != len(model) {
						t.Fatalf("op %d: n = %d, want %d", op, p.n, len(model))
					}
				}
				seen := map[k]bool{}
				p.each(func(h uint64, en inflightEntry) {
					x := k{h, string(p.key(en))}
					if exactMode {
						if gen, ok := model[x]; !ok || gen != en.gen || seen[x] {
							t.Fatalf("each: unexpected %#x %q gen %d", h, x.key, en.gen)
						}
					}
					seen[x] = true
				})
				if exactMode && len(seen) != len(model) {
					t.Fatalf("each visited %d keys, want %d", len(seen), len(model))
				}
			})
		}
	}
}

// BenchmarkInflightSet measures the in-flight set's lookups of keys not
// held (the common case: every new key) and its adds.
func BenchmarkInflightSet(b *testing.B) {
	const n = 8192
	r := rand.New(rand.NewPCG(1, 2))
	hs := make([]uint64, 1<<16)
	for i := range hs {
		hs[i] = r.Uint64()
	}
	key := []byte("0123456789abcdef")
	b.Run("miss", func(b *testing.B) {
		p := newInflightSet(n)
		for _, h := range hs[:n] {
			p.add(h, key, 1, true)
		}
		i := 0
		for b.Loop() {
			if p.has(hs[n+i&(len(hs)-n-1)], key, true) {
				b.Fatal("hit")
			}
			i++
		}
	})
	b.Run("add", func(b *testing.B) {
		p := newInflightSet(0)
		i := 0
		for b.Loop() {
			if i%n == 0 {
				p.init(n, n*len(key))
			}
			p.add(hs[i%len(hs)], key, 1, true)
			i++
		}
	})
}
