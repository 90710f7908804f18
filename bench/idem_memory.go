package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// memKV is an [idemKV] on a Go map: the middleware keeping its keys in
// its own process, as in-process idempotency middlewares do (a replica
// that restarts forgets them, a second replica does not see them).
type memKV struct {
	mu sync.Mutex
	m  map[string]memEntry
}

type memEntry struct {
	v   []byte
	exp time.Time
}

func newMemKV() *memKV { return &memKV{m: make(map[string]memEntry)} }

// live returns k's entry if it has not expired; mu is held.
func (s *memKV) live(k string) (memEntry, bool) {
	e, ok := s.m[k]
	if ok && time.Now().After(e.exp) {
		delete(s.m, k)
		return memEntry{}, false
	}
	return e, ok
}

func (s *memKV) SetNX(_ context.Context, k string, v []byte, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live(k); ok {
		return false, nil
	}
	s.m[k] = memEntry{v: v, exp: time.Now().Add(ttl)}
	return true, nil
}

func (s *memKV) Get(_ context.Context, k string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, _ := s.live(k)
	return e.v, nil
}

func (s *memKV) Set(_ context.Context, k string, v []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = memEntry{v: v, exp: time.Now().Add(ttl)}
	return nil
}

func (s *memKV) Del(_ context.Context, k string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
	return nil
}

// ServeIdemMemory serves the common idempotency middleware, the Redis
// build's, keeping its keys in a Go map, in front of upstream on listen
// until ctx ends. dedupbench idem runs it in a process of its own (see
// [IdemConfig.TargetCmd]): the pattern as in-process middlewares build
// it, with no durability and no store to ask.
func ServeIdemMemory(ctx context.Context, listen, upstream string, stderr io.Writer) error {
	rp, err := idemReverseProxy(upstream)
	if err != nil {
		return err
	}
	return serveOwnTarget(ctx, memoryTarget, listen, kvIdempotency(newMemKV(), rp, 30*time.Second, 24*time.Hour), stderr)
}

// ServeIdemConstant answers every request on listen, until ctx ends, as
// a replay of the upstream's answer (a bodySize-byte charge) built on the
// spot: net/http with no middleware and no store, the floor of a replay
// on net/http, in a process of its own (see [IdemConfig.TargetCmd]).
func ServeIdemConstant(ctx context.Context, listen string, bodySize int, stderr io.Writer) error {
	pad := chargePad(bodySize)
	return serveOwnTarget(ctx, constantTarget, listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Idempotent-Replayed", "true")
		writeCharge(w, r, pad)
	}), stderr)
}

// serveOwnTarget serves h on listen until ctx ends, saying "NAME:
// listening on ADDR" on stderr once it accepts.
func serveOwnTarget(ctx context.Context, name, listen string, h http.Handler, stderr io.Writer) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("bench: %s: %w", name, err)
	}
	srv := &http.Server{Handler: h}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	fmt.Fprintf(stderr, "%s: listening on %s\n", name, ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("bench: %s: %w", name, err)
	}
	return nil
}
