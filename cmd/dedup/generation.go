package main

import (
	"strings"
	"time"
)

// generationJSON is one generation in the JSON of dedup stats
// (engine.generation_stats, from the engine) and of dedup snapshot
// inspect (generations, summed over a snapshot's shards): one shape, each
// command filling what it knows and leaving the rest out.
type generationJSON struct {
	ID    uint64    `json:"id"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Kind is the filter kind, "blocked+fuse" where shards differ.
	Kind string `json:"kind,omitempty"`
	Keys uint64 `json:"keys"`
	// MemoryBytes is the memory of the generation's filters; FPRate
	// their false-positive rate (a snapshot's: the mean over its shards).
	// A snapshot inspected with --quick has neither.
	MemoryBytes uint64  `json:"memory_bytes,omitempty"`
	FPRate      float64 `json:"fp_rate,omitempty"`
	// Sealed says an engine's fuse generation was rebuilt as a static
	// filter (dedup stats only).
	Sealed *bool `json:"sealed,omitempty"`
	// Of a snapshot (dedup snapshot inspect only): its shards, whether
	// every shard's segment is final (written once, never again), the
	// segments' bytes on disk, the filters' capacity and fill (keys /
	// capacity, without --quick).
	Shards    int     `json:"shards,omitempty"`
	Final     *bool   `json:"final,omitempty"`
	FileBytes int64   `json:"file_bytes,omitempty"`
	Capacity  uint64  `json:"capacity,omitempty"`
	Fill      float64 `json:"fill,omitempty"`
}

// addKind adds a shard's filter kind k to g's.
func (g *generationJSON) addKind(k string) {
	if k == "" || g.Kind == k || strings.HasPrefix(g.Kind, k+"+") || strings.HasSuffix(g.Kind, "+"+k) || strings.Contains(g.Kind, "+"+k+"+") {
		return
	}
	if g.Kind == "" {
		g.Kind = k
		return
	}
	g.Kind += "+" + k
}
