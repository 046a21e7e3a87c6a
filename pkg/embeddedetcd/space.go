package embeddedetcd

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// freedBelow is the share of the quota the database must be under, once
// compacted and defragmented, for writes to be taken again: right under
// the quota, the next writes would fill it again at once.
const freedBelow = 0.9

// KeepSpace takes writes again once room is made, until ctx ends. When the
// database reaches its quota, etcd raises its NOSPACE alarm and refuses
// every write that adds (deletes still pass), and the alarm stays until
// someone disarms it, however much is deleted meanwhile: for a member
// inside nodus-server, an operator would need etcdctl, the member's client
// certificate and etcd's maintenance steps. Every interval, while the
// alarm stands, at the first round and then whenever something was
// written (deleted) since the last try, KeepSpace compacts the history to
// now (what was deleted, and the older versions of what was changed, are
// then gone: watches behind that relist); every round, once what is live
// is under freedBelow of the quota, it defragments and disarms.
func (s *Server) KeepSpace(ctx context.Context, interval time.Duration) {
	client := s.InProcessClient()
	defer client.Close()
	var last round
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		next, err := s.makeRoom(ctx, client, last)
		if err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "making room in the embedded etcd")
			continue
		}
		last = next
	}
}

// round is what a round of KeepSpace leaves the next.
type round struct {
	// compacted is the revision the history was compacted to.
	compacted int64
	// defragmented says the database was defragmented since, and stayed
	// over the line: until more is deleted, doing it again (every read
	// and write of the member blocked meanwhile) would not help.
	defragmented bool
}

// makeRoom does one round of KeepSpace after last.
func (s *Server) makeRoom(ctx context.Context, client *clientv3.Client, last round) (round, error) {
	alarms, err := client.AlarmList(ctx)
	if err != nil {
		return last, err
	}
	var full *pb.AlarmMember
	for _, a := range alarms.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			full = a
		}
	}
	if full == nil {
		return last, nil
	}
	before, err := client.Status(ctx, s.ClientURL)
	if err != nil {
		return last, err
	}
	revision := before.Header.Revision
	if revision == last.compacted && last.defragmented {
		return last, nil
	}
	// Nothing deleted since the last round: nothing more to compact. The
	// room the last compaction made is still looked for: etcd counts the
	// pages a compaction frees at a later commit, so the round that
	// compacted may have read the member as full as before, and a member
	// that waited for the next delete refused writes meanwhile.
	compacting := revision != last.compacted
	if compacting {
		if _, err := client.Compact(ctx, revision, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			return last, err
		}
	}
	this := round{compacted: revision}
	// Defragmenting blocks every read and write of the member for as long
	// as it copies what is live (seconds per GiB): only when it then gives
	// writes back, not for every delete while the store stays full.
	compacted, err := client.Status(ctx, s.ClientURL)
	if err != nil {
		return this, err
	}
	if float64(compacted.DbSizeInUse) >= freedBelow*float64(s.quota) {
		if compacting { // said once per compaction, not every round
			klog.InfoS("the embedded etcd is still full: it refuses writes until more is deleted",
				"databaseBytes", compacted.DbSize, "inUseBytes", compacted.DbSizeInUse, "quotaBytes", s.quota)
		}
		return this, nil
	}
	// The member's own call: the in-process client's defragment needs a
	// health notifier that v3client does not give it.
	if err := s.etcd.Server.Defragment(); err != nil {
		return this, err
	}
	after, err := client.Status(ctx, s.ClientURL)
	if err != nil {
		return this, err
	}
	if float64(after.DbSize) >= freedBelow*float64(s.quota) {
		klog.InfoS("the embedded etcd is still full after defragmenting: it refuses writes until more is deleted",
			"databaseBytes", after.DbSize, "quotaBytes", s.quota)
		this.defragmented = true
		return this, nil
	}
	if _, err := client.AlarmDisarm(ctx, (*clientv3.AlarmMember)(full)); err != nil {
		return this, err
	}
	klog.InfoS("the embedded etcd had filled its quota: compacted, defragmented, and taking writes again",
		"databaseBytesBefore", before.DbSize, "databaseBytes", after.DbSize, "quotaBytes", s.quota)
	return this, nil
}
