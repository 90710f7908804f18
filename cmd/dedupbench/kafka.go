package main

import (
	"context"
	"fmt"
	"io"

	"github.com/streamdedup/dedup/bench"
)

// runKafka is "dedupbench kafka": dedup consumers against a transactional
// passthrough on an in-process broker.
func runKafka(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "handover" {
		return runKafkaHandover(ctx, args[1:], stdout, stderr)
	}
	var c common
	var cfg bench.KafkaConfig
	cfg.EnsureDefaults() // the flags' defaults
	cfg.Instances = nil  // --instances: its own list
	var instances ints
	fs := newFlagSet("dedupbench kafka", stderr)
	c.bind(fs)
	fs.IntVar(&cfg.Events, "events", cfg.Events, "input events of each throughput run")
	p := fs.Int("partitions", int(cfg.Partitions), "input partitions")
	fs.Var(&instances, "instances", "group sizes measured, comma-separated (default 1,2,3)")
	fs.Float64Var(&cfg.DuplicateFraction, "dup", cfg.DuplicateFraction, "share of the input that repeats an earlier key")
	fs.Float64Var(&cfg.LatencyRate, "latency-rate", cfg.LatencyRate, "events/s of the end-to-end latency runs")
	fs.DurationVar(&cfg.LatencyFor, "latency-for", cfg.LatencyFor, "how long each latency run produces")
	fs.IntVar(&cfg.Repeat, "repeat", cfg.Repeat, "runs of each throughput measurement (the median is reported)")
	fs.BoolVar(&cfg.Probabilistic, "probabilistic", false, "engines without exact stores")
	fs.StringVar(&cfg.Dir, "dir", "", "state directory of the engines (default: a temporary one)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.Partitions = int32(*p)
	cfg.Instances = instances
	res, err := bench.Kafka(ctx, cfg, newProgress(c, stderr))
	if err != nil {
		return err
	}
	if err := c.charts(stderr, func(dir string) ([]string, error) { return bench.PlotKafka(res, dir) }); err != nil {
		return err
	}
	return output(c, stdout, res, func() error { return res.WriteText(stdout) })
}

// ints is a comma-separated list of integers.
type ints []int

func (v *ints) String() string { return fmt.Sprint([]int(*v)) }
func (v *ints) Set(s string) error {
	*v = nil
	var f floats
	if err := f.Set(s); err != nil {
		return err
	}
	for _, x := range f {
		if x != float64(int(x)) {
			return fmt.Errorf("want whole numbers, got %v", x)
		}
		*v = append(*v, int(x))
	}
	return nil
}

// runKafkaHandover is "dedupbench kafka handover": time to ready after a
// partition move, by replay and by handover, at each partition size.
func runKafkaHandover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var cfg bench.KafkaHandoverConfig
	var records ints
	fs := newFlagSet("dedupbench kafka handover", stderr)
	c.bind(fs)
	fs.Var(&records, "records", "records in the moved partition, comma-separated (default 1000000,10000000)")
	fs.IntVar(&cfg.Repeat, "repeat", 2, "moves of each kind timed per size (the median is reported)")
	fs.Float64Var(&cfg.DuplicateFraction, "dup", 0.2, "share of the input that repeats an earlier key")
	fs.BoolVar(&cfg.Probabilistic, "probabilistic", false, "engines without exact stores")
	fs.StringVar(&cfg.Dir, "dir", "", "directory of the states and the handover store (default: a temporary one)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.Records = records
	res, err := bench.KafkaHandover(ctx, cfg, newProgress(c, stderr))
	if err != nil {
		return err
	}
	if err := c.charts(stderr, func(dir string) ([]string, error) { return bench.PlotKafkaHandover(res, dir) }); err != nil {
		return err
	}
	return output(c, stdout, res, func() error { return res.WriteText(stdout) })
}
