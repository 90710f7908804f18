package main

import (
	"flag"
	"net"
	"strconv"

	"github.com/streamdedup/dedup/resp"
)

// clusterFlags are the flags that make `dedup serve` a Redis Cluster node.
type clusterFlags struct {
	enabled  bool
	mapFile  string
	announce string
	handover string
}

func (f *clusterFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "cluster", false, "answer as a Redis Cluster (CLUSTER SLOTS, MOVED...): alone, one node owning every slot; with --cluster-map, a node of several")
	fs.StringVar(&f.mapFile, "cluster-map", "", "the cluster's slot map `FILE`, the same on every node: lines START-END HOST:PORT (implies --cluster)")
	fs.StringVar(&f.announce, "cluster-announce", "", "this node's address `HOST:PORT` in the map and in CLUSTER SLOTS (default 127.0.0.1 and the --listen port)")
	fs.StringVar(&f.handover, "cluster-handover", "", "blob store `URL` shared by the nodes (file:///DIR, s3://...) through which a slot range moves (DEDUP.CLUSTER MOVE); needs --state")
}

// options returns the server's cluster options, nil when not a cluster
// node; addr is the address the server listens on.
func (f *clusterFlags) options(addr net.Addr) (*resp.ClusterOptions, error) {
	if !f.enabled && f.mapFile == "" {
		if f.announce != "" || f.handover != "" {
			return nil, usagef("serve: --cluster-announce and --cluster-handover need --cluster or --cluster-map")
		}
		return nil, nil
	}
	o := &resp.ClusterOptions{Announce: f.announce, Handover: f.handover}
	if o.Announce == "" {
		port := 0
		if a, ok := addr.(*net.TCPAddr); ok {
			port = a.Port
		}
		o.Announce = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	if f.mapFile != "" {
		m, err := resp.ReadSlotMap(f.mapFile)
		if err != nil {
			return nil, usagef("serve: --cluster-map: %v", err)
		}
		o.Map = m
	} else if f.handover != "" {
		return nil, usagef("serve: --cluster-handover needs --cluster-map: a range moves between the nodes of a map")
	}
	return o, nil
}
