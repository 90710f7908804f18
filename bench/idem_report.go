package bench

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/streamdedup/dedup/internal/humanize"
)

// WriteText writes the comparison tables, one per upstream latency.
func (r *IdemResult) WriteText(w io.Writer) error {
	workers := "any number of requests at a time"
	if n := r.Config.UpstreamWorkers; n > 0 {
		workers = fmt.Sprintf("%d requests at a time", n)
	}
	fmt.Fprintf(w, "idempotency keys: %d new keys then %d replays per target and round, %d rounds (targets in turn), %d clients, %d-byte responses; the upstream serves %s\n",
		r.Config.Requests, r.Config.Replays, r.Config.Rounds, r.Config.Clients, r.Config.BodySize, workers)
	if r.Machine != nil {
		fmt.Fprintln(w, r.Machine.String())
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	us := func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
	for _, latency := range r.Config.UpstreamLatencies {
		section := r.section(latency)
		var direct, redisRow *IdemRow
		for i := range section {
			switch section[i].Target {
			case "upstream directly":
				direct = &section[i]
			case "redis middleware":
				redisRow = &section[i]
			}
		}
		fmt.Fprintf(w, "\nupstream service time %v:\n\n", latency)
		var rows [][]string
		for _, x := range section {
			vsDirect, vsRedis, replayVsRedis := "-", "-", "-"
			if direct != nil {
				vsDirect = ratio(x.NewPerSec, direct.NewPerSec)
			}
			if redisRow != nil {
				vsRedis = ratio(x.NewPerSec, redisRow.NewPerSec)
				if x.Target != "upstream directly" {
					replayVsRedis = ratio(x.ReplayPerSec, redisRow.ReplayPerSec)
				}
			}
			mem, disk := "-", "-"
			if x.RSSPerResult > 0 {
				mem = fmt.Sprintf("%.0f B", x.RSSPerResult)
			}
			if x.DiskPerResult > 0 {
				disk = fmt.Sprintf("%.0f B", x.DiskPerResult)
			}
			newRate, newLat, calls := "-", "-", "-"
			if x.NewPerSec > 0 {
				newRate, newLat, calls = humanize.Count(x.NewPerSec), lat(x.NewP50)+" / "+lat(x.NewP99), strconv.FormatInt(x.UpstreamCalls, 10)
			} else {
				// A target that answers every request as a replay.
				vsDirect, vsRedis = "-", "-"
			}
			rows = append(rows, []string{x.Target, newRate, vsDirect, vsRedis, newLat,
				humanize.Count(x.ReplayPerSec), replayVsRedis, lat(x.ReplayP99), calls,
				us(x.NewCPU) + " / " + us(x.ReplayCPU), us(x.BenchNewCPU) + " / " + us(x.BenchReplayCPU), mem, disk})
		}
		if err := table(w, "target\tnew/s\tvs direct\tvs redis\tp50 / p99 new\treplays/s\tvs redis\tp99 replay\tupstream calls\tCPU/req new / replay\tbench CPU/req new / replay\tRSS/result\tdisk/result", rows); err != nil {
			return err
		}
	}
	return nil
}

// section returns the rows measured with the upstream taking latency.
func (r *IdemResult) section(latency time.Duration) []IdemRow {
	var rows []IdemRow
	for _, x := range r.Rows {
		if x.UpstreamLatency == latency {
			rows = append(rows, x)
		}
	}
	return rows
}
