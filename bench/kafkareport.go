package bench

import (
	"fmt"
	"io"
	"strconv"

	"github.com/streamdedup/dedup/internal/humanize"
	"gonum.org/v1/plot/plotter"
)

// WriteText writes the scenario's tables.
func (r *KafkaResult) WriteText(w io.Writer) error {
	rows := make([][]string, 0, len(r.Rows))
	for _, x := range r.Rows {
		rows = append(rows, []string{strconv.Itoa(x.Instances), humanize.Count(x.Passthrough), humanize.Count(x.Dedup), fmt.Sprintf("%.2f", x.Ratio),
			fmt.Sprintf("%.2f", x.PassthroughCPU), fmt.Sprintf("%.2f", x.DedupCPU), fmt.Sprintf("%.2f", x.CPURatio)})
	}
	fmt.Fprintf(w, "Kafka (in-process kfake broker, %d partitions, %d events, %.0f%% duplicates; events/s between 10%% and 90%% of the input, median of %d)\n\n",
		r.Config.Partitions, r.Config.Events, 100*r.Config.DuplicateFraction, r.Config.Repeat)
	if err := table(w, "instances\tpassthrough ev/s\tdedup ev/s\tdedup/passthrough\tpassthrough CPU us/ev\tdedup CPU us/ev\tCPU passthrough/dedup", rows); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nEnd to end at %.0f events/s (produce to read_committed output): passthrough p50 %s p99 %s, dedup p50 %s p99 %s\n",
		r.Config.LatencyRate, lat(r.P50Passthrough), lat(r.P99Passthrough), lat(r.P50Dedup), lat(r.P99Dedup))
	rb := r.Rebalance
	fmt.Fprintf(w, "Through rebalances (%v at %.0f events/s; a second instance joins after a third, the first leaves after two thirds): passthrough p50 %s p99 %s max %s, dedup p50 %s p99 %s max %s\n",
		3*r.Config.LatencyFor, r.Config.LatencyRate, lat(rb.P50Passthrough), lat(rb.P99Passthrough), lat(rb.MaxPassthrough), lat(rb.P50Dedup), lat(rb.P99Dedup), lat(rb.MaxDedup))
	m := r.Move
	_, err := fmt.Fprintf(w, "Partition move: %d partitions to a new instance with no state, %s records replayed, ready in %s (slowest);\n  replay %s records/s (%s per partition) vs one instance's ingest %s events/s over %d partitions: %.2fx\n",
		m.Moved, humanize.Count(float64(m.Replayed)), lat(m.Ready), humanize.Count(m.ReplayRate), humanize.Count(m.PerPartition), humanize.Count(m.IngestRate), r.Config.Partitions, m.Ratio)
	return err
}

// PlotKafka draws events per second against the group size for the
// passthrough and dedup: kafka_throughput, as SVG and PNG in dir.
func PlotKafka(r *KafkaResult, dir string) ([]string, error) {
	var pass, dd plotter.XYs
	for _, x := range r.Rows {
		pass = append(pass, plotter.XY{X: float64(x.Instances), Y: x.Passthrough})
		dd = append(dd, plotter.XY{X: float64(x.Instances), Y: x.Dedup})
	}
	return plotLines(dir, "kafka_throughput", "dedup on Kafka (kfake): events/s vs instances",
		"instances", "events/s", "passthrough", pass, "dedup", dd)
}
