// Package bench measures the dedup engine: the duplicate-suppression
// window model run through it, open-loop load, and the engine side by
// side with the layers users would otherwise pick. It is a
// library; cmd/dedupbench binds its configs to flags and prints its
// reports.
//
// Four runs, each a Config in and a Result out, with a WriteText report
// ([Serve] and [Kafka] drive the servers the same way; [Kafka] is in
// kafka.go, its latency runs in kafkalatency.go, its passthrough baseline
// in kafkapass.go, its report and [PlotKafka] in kafkareport.go):
//
//   - [Simulate] (simulate.go): the window model ([Reference]) on
//     a virtual clock: keys held, memory, duplicates leaked per window, and
//     the window that meets a leak target; bimodal redelivery too.
//   - [Load] (load.go): events offered at fixed rates whether or not the
//     engine keeps up; latency quantiles and a time series per rate.
//   - [Compare] (compare.go): one stream through every engine mode and
//     every baseline, each in a process of its own ([RunChild], child.go)
//     so that its resident set is measured alone, redis-server's read from
//     its own /proc (internal/procmem); the memory at scale
//     (1M and 10M distinct keys per target); [MemorySweep] (sweep.go), filter
//     memory per key against the false-positive target.
//   - [FilterCmd] (filtercmd.go): the dedup command with its keys in memory
//     against awk's !seen[key]++ on one NDJSON file, peak RSS of each.
//
// What they run on:
//
//   - [Stream] (gen.go): a synthetic clickstream, originals as a Poisson
//     process and duplicates after a random delay ([DelayOptions]).
//   - [Target] (target.go): a layer under test. [EngineTarget] is this
//     engine on a [VirtualClock]; the baselines are [MapTarget],
//     [BloomTarget], [PebbleTarget] (baselines.go) and [RedisTarget]
//     (redis.go, against a real redis-server started by [StartRedis]).
//   - [Histogram] (hist.go): log-linear latency quantiles.
//
// Output: report.go writes the text tables and [WriteJSON] the JSON, both
// with the [Machine] and load the run had; plot.go draws the charts
// ([PlotHeadline], [PlotScale], [PlotMemory], [PlotLoad], [PlotServe]) from reusable
// parts: [BarChart] (log axis, a 1x reference bar), [LineChart] (log-log,
// markers at measured points, reference lines) and [Figure] (panels, the
// legend outside the data, a caption saying what, where and when). Long
// runs report to a [Progress].
package bench
