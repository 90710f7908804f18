package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaClientSettings maps the Kafka client settings --client-config
// takes (librdkafka's and the Java client's names, where they exist) to
// franz-go options.
var kafkaClientSettings = map[string]func(v string) (kgo.Opt, error){
	"client.id":                          func(v string) (kgo.Opt, error) { return kgo.ClientID(v), nil },
	"fetch.max.bytes":                    int32Setting(func(n int32) kgo.Opt { return kgo.FetchMaxBytes(n) }),
	"fetch.min.bytes":                    int32Setting(func(n int32) kgo.Opt { return kgo.FetchMinBytes(n) }),
	"max.partition.fetch.bytes":          int32Setting(func(n int32) kgo.Opt { return kgo.FetchMaxPartitionBytes(n) }),
	"fetch.max.wait.ms":                  msSetting(func(d time.Duration) kgo.Opt { return kgo.FetchMaxWait(d) }),
	"linger.ms":                          msSetting(func(d time.Duration) kgo.Opt { return kgo.ProducerLinger(d) }),
	"request.timeout.ms":                 msSetting(func(d time.Duration) kgo.Opt { return kgo.RequestTimeoutOverhead(d) }),
	"socket.connection.setup.timeout.ms": msSetting(func(d time.Duration) kgo.Opt { return kgo.DialTimeout(d) }),
	"retry.timeout.ms":                   msSetting(func(d time.Duration) kgo.Opt { return kgo.RetryTimeout(d) }),
	"max.buffered.records": func(v string) (kgo.Opt, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want a positive integer")
		}
		return kgo.MaxBufferedRecords(n), nil
	},
	"compression.type": func(v string) (kgo.Opt, error) {
		c, ok := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
			"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}[v]
		if !ok {
			return nil, fmt.Errorf("want none, gzip, snappy, lz4 or zstd")
		}
		return kgo.ProducerBatchCompression(c), nil
	},
}

func int32Setting(f func(int32) kgo.Opt) func(string) (kgo.Opt, error) {
	return func(v string) (kgo.Opt, error) {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want a positive 32-bit integer")
		}
		return f(int32(n)), nil
	}
}

func msSetting(f func(time.Duration) kgo.Opt) func(string) (kgo.Opt, error) {
	return func(v string) (kgo.Opt, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("want milliseconds, a non-negative integer")
		}
		return f(time.Duration(n) * time.Millisecond), nil
	}
}

// parseClientConfig turns --client-config KEY=VALUE settings into client
// options; an unknown key or a bad value is a usage error naming it.
func parseClientConfig(settings []string) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	for _, s := range settings {
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return nil, usagef("kafka: --client-config %q: want KEY=VALUE", s)
		}
		f, known := kafkaClientSettings[k]
		if !known {
			keys := make([]string, 0, len(kafkaClientSettings))
			for k := range kafkaClientSettings {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return nil, usagef("kafka: --client-config %s: unknown setting; known: %s", k, strings.Join(keys, ", "))
		}
		o, err := f(v)
		if err != nil {
			return nil, usagef("kafka: --client-config %s=%s: %v", k, v, err)
		}
		opts = append(opts, o)
	}
	return opts, nil
}
