package idempotency_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/streamdedup/dedup"
	"github.com/streamdedup/dedup/idempotency"
)

// BenchmarkMiddleware measures the middleware and the engine alone (no
// network): a replay of a stored response, and a new key on a state
// directory (two durable writes: the claim and the result).
func BenchmarkMiddleware(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 256)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	})
	setup := func(b *testing.B) http.Handler {
		e, err := dedup.Open(dedup.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		mw, err := idempotency.New(idempotency.Options{Store: e})
		if err != nil {
			b.Fatal(err)
		}
		return mw(h)
	}
	req := func(key string) *http.Request {
		r := httptest.NewRequest("POST", "/charges", bytes.NewReader([]byte(`{"amount":100}`)))
		r.Header.Set("Idempotency-Key", key)
		return r
	}
	b.Run("replay", func(b *testing.B) {
		srv := setup(b)
		const keys = 1000
		for i := 0; i < keys; i++ {
			srv.ServeHTTP(httptest.NewRecorder(), req(strconv.Itoa(i)))
		}
		var n atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req(strconv.Itoa(int(n.Add(1)%keys))))
				if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
					b.Fatalf("status %d", w.Code)
				}
				io.Copy(io.Discard, w.Body)
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replays/s")
	})
	b.Run("replay-one-key", func(b *testing.B) {
		// A retry storm: every request repeats the same stored key.
		srv := setup(b)
		srv.ServeHTTP(httptest.NewRecorder(), req("storm"))
		b.ReportAllocs()
		b.SetParallelism(32)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req("storm"))
				if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "true" {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "replays/s")
	})
	b.Run("new", func(b *testing.B) {
		srv := setup(b)
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(32) // concurrent requests share group commits
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req("new-"+strconv.Itoa(int(n.Add(1)))))
				if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "keys/s")
	})
}
