package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/redis/go-redis/v9"
	"github.com/streamdedup/dedup/internal/diskuse"
)

// startRedisMiddleware runs the usual Redis build of the pattern in front
// of up: a Go reverse proxy (in this process) that takes the key with SET
// NX PX (the lock, holding the request's fingerprint), stores the response
// with SET PX (the TTL) once the upstream answers, answers a repeat from
// GET, and deletes the key when the upstream fails. redis-server runs
// without persistence, as the pattern is usually deployed, or with durable
// set: an append-only file fsynced before every reply (appendfsync
// always), durable as dedup's claims and results are.
func startRedisMiddleware(ctx context.Context, cfg IdemConfig, up *upstream, durable bool) (*idemTarget, func(), error) {
	name, extra := "redis middleware", []string(nil)
	if durable {
		name, extra = "redis middleware, fsync always", []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	rs, err := StartRedis(ctx, extra...)
	if err != nil {
		return nil, nil, err
	}
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: cfg.Clients * 2})
	rp, err := idemReverseProxy(up.url)
	if err != nil {
		return nil, nil, errors.Join(err, rc.Close(), rs.Stop())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("bench: %w", err), rc.Close(), rs.Stop())
	}
	srv := &http.Server{Handler: kvIdempotency(redisKV{rc}, rp, 30*time.Second, 24*time.Hour)}
	go srv.Serve(ln)
	pid := rs.cmd.Process.Pid
	t := &idemTarget{name: name, url: "http://" + ln.Addr().String(),
		memory: func() (uint64, uint64, error) {
			_, rss, err := infoMemory(ctx, rc)
			if err != nil || !durable {
				return rss, 0, err
			}
			disk, err := diskuse.Bytes(vfs.Default, rs.dir)
			return rss, disk, err
		},
		cpu: func() (time.Duration, error) { return procCPU(pid) },
	}
	return t, func() { srv.Close(); rc.Close(); rs.Stop() }, nil
}

// idemReverseProxy is the reverse proxy to upstream the common middleware
// wraps, keeping as many idle connections as dedup proxy does.
func idemReverseProxy(upstream string) (*httputil.ReverseProxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("bench: upstream: %w", err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	rp.Transport = tr
	return rp, nil
}

// redisResponse is a response as the Redis build stores it.
type redisResponse struct {
	Fingerprint string      `json:"fp"`
	Status      int         `json:"status"`
	Header      http.Header `json:"header"`
	Body        []byte      `json:"body"`
}

// idemKV is where the common middleware keeps keys: Redis, or a Go map
// in the middleware's own process.
type idemKV interface {
	// SetNX stores v under k for ttl unless k holds a value; it reports
	// whether it stored.
	SetNX(ctx context.Context, k string, v []byte, ttl time.Duration) (bool, error)
	// Get returns k's value, nil if it holds none.
	Get(ctx context.Context, k string) ([]byte, error)
	Set(ctx context.Context, k string, v []byte, ttl time.Duration) error
	Del(ctx context.Context, k string) error
}

// redisKV is an [idemKV] on redis-server.
type redisKV struct{ rc *redis.Client }

func (r redisKV) SetNX(ctx context.Context, k string, v []byte, ttl time.Duration) (bool, error) {
	return r.rc.SetNX(ctx, k, v, ttl).Result()
}

func (r redisKV) Get(ctx context.Context, k string) ([]byte, error) {
	v, err := r.rc.Get(ctx, k).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

func (r redisKV) Set(ctx context.Context, k string, v []byte, ttl time.Duration) error {
	return r.rc.Set(ctx, k, v, ttl).Err()
}

func (r redisKV) Del(ctx context.Context, k string) error { return r.rc.Del(ctx, k).Err() }

// kvIdempotency is the common middleware, as services write it: lock,
// run, store or delete.
func kvIdempotency(kv idemKV, next http.Handler, lease, ttl time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		fp := fmt.Sprintf("%x", sha256.Sum256([]byte(r.Method+"\x00"+r.URL.RequestURI()+"\x00"+string(body))))
		ctx := r.Context()
		rk := "idem:" + key
		ok, err := kv.SetNX(ctx, rk, []byte("lock:"+fp), lease)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !ok {
			v, err := kv.Get(ctx, rk)
			if err != nil || v == nil || bytes.HasPrefix(v, []byte("lock:")) {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "in progress", http.StatusConflict)
				return
			}
			var s redisResponse
			if err := json.Unmarshal(v, &s); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if s.Fingerprint != fp {
				http.Error(w, "key reused", http.StatusUnprocessableEntity)
				return
			}
			for k, vs := range s.Header {
				w.Header()[k] = vs
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(s.Status)
			w.Write(s.Body)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &redisRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		if rec.status >= 500 || rec.status == http.StatusTooManyRequests {
			kv.Del(context.WithoutCancel(ctx), rk)
			return
		}
		h := w.Header().Clone()
		h.Del("Date")
		v, _ := json.Marshal(redisResponse{Fingerprint: fp, Status: rec.status, Header: h, Body: rec.body.Bytes()})
		kv.Set(context.WithoutCancel(ctx), rk, v, ttl)
	})
}

type redisRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *redisRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *redisRecorder) Write(p []byte) (int, error) {
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}
