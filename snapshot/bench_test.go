package snapshot

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/streamdedup/dedup/filter"
)

const (
	benchGens    = 8
	benchShards  = 2
	benchPayload = 16 << 20
)

// benchGenerations returns benchGens×benchShards generations of one shared
// payload; generations below newest are final when finalOld is set, and the
// newest one's Count is count.
func benchGenerations(payload []byte, finalOld bool, count uint64) []Generation {
	var gs []Generation
	for id := uint64(1); id <= benchGens; id++ {
		for sh := uint32(0); sh < benchShards; sh++ {
			g := Generation{
				ID: id, Shard: sh, Start: int64(id) * 1e9, End: int64(id+1) * 1e9,
				Count: 1000, Kind: filter.Blocked, Final: finalOld && id < benchGens,
				Payload: func() ([]byte, error) { return payload, nil },
			}
			if id == benchGens {
				g.Count = count
			}
			gs = append(gs, g)
		}
	}
	return gs
}

func benchPayloadBytes() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, benchPayload)
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// BenchmarkWrite writes 8 generations × 2 shards of 16 MiB to a directory
// on disk: "full" rewrites every segment, "final" only the newest
// generation's (the seven older ones are final and reused).
func BenchmarkWrite(b *testing.B) {
	payload := benchPayloadBytes()
	total := int64(benchGens * benchShards * benchPayload)
	for _, mode := range []string{"full", "final"} {
		b.Run(fmt.Sprintf("%s/%dx%dx%dMiB", mode, benchGens, benchShards, benchPayload>>20), func(b *testing.B) {
			fs, dir := vfs.Default, b.TempDir()
			if _, err := Write(fs, dir, header(1), benchGenerations(payload, mode == "final", 1)); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var written int64
			for i := 0; i < b.N; i++ {
				info, err := Write(fs, dir, header(uint64(i+2)), benchGenerations(payload, mode == "final", uint64(i+2)))
				if err != nil {
					b.Fatal(err)
				}
				if info.CleanupErr != nil {
					b.Fatal(info.CleanupErr)
				}
				written += info.Written
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(written)/float64(b.N)/(1<<20), "MiBwritten/op")
			b.ReportMetric(float64(total)*float64(b.N)/sec/(1<<20), "snapMiB/s")
			b.ReportMetric(float64(written)/sec/(1<<20), "diskMiB/s")
		})
	}
}

// BenchmarkLoad reads back and verifies the same snapshot (page cache warm).
func BenchmarkLoad(b *testing.B) {
	payload := benchPayloadBytes()
	fs, dir := vfs.Default, b.TempDir()
	info, err := Write(fs, dir, header(1), benchGenerations(payload, false, 1))
	if err != nil {
		b.Fatal(err)
	}
	for _, op := range []string{"Latest", "Read", "Verify", "Inspect"} {
		b.Run(op, func(b *testing.B) {
			b.SetBytes(info.TotalSize)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var err error
				switch op {
				case "Latest":
					_, err = Latest(fs, dir)
				case "Read":
					_, err = Read(fs, info.Path)
				case "Verify":
					err = Verify(fs, info.Path)
				case "Inspect":
					_, err = Inspect(fs, info.Path)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
