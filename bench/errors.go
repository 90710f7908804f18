package bench

import "errors"

// ErrNoRedisBenchmark reports that redis-benchmark is not on PATH.
var ErrNoRedisBenchmark = errors.New("bench: redis-benchmark not installed")

// ErrNoRedis reports that redis-server is not on PATH.
var ErrNoRedis = errors.New("bench: redis-server not installed")
