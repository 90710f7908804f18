package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// idemLoad sends n POSTs from clients goroutines, request i with key
// prefix+keyOf(i), records each latency in h and returns requests per
// second. Every response must be 201; with replayed, also marked replayed.
func idemLoad(ctx context.Context, client *http.Client, url, prefix string, n, clients int, keyOf func(int) int, p Progress, replayed bool, h *Histogram) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	hists := make([]Histogram, clients)
	errs := make([]error, clients)
	body := []byte(`{"amount":1000,"currency":"eur","source":"tok_visa"}`)
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := 0
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					break
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", url+"/charges", bytes.NewReader(body))
				req.Header.Set("Idempotency-Key", prefix+strconv.Itoa(keyOf(i)))
				req.Header.Set("Content-Type", "application/json")
				t := time.Now()
				res, err := client.Do(req)
				if err != nil {
					errs[c] = err
					return
				}
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				hists[c].Record(time.Since(t))
				if err != nil {
					errs[c] = err
					return
				}
				if res.StatusCode != http.StatusCreated || (replayed && res.Header.Get("Idempotent-Replayed") != "true") {
					errs[c] = fmt.Errorf("status %d, replayed %q", res.StatusCode, res.Header.Get("Idempotent-Replayed"))
					return
				}
				if done++; p != nil && done%64 == 0 {
					p.Add(64)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	for i := range hists {
		h.Merge(&hists[i])
	}
	return float64(n) / el.Seconds(), nil
}
