// Package liveness tracks which nodes' agents are alive with etcd leases, so
// that a heartbeat costs a lease keep-alive (which etcd's leader answers
// without a raft write) instead of a write of the Node. A node's key lives
// while its agent beats; it vanishes TTL after the last beat.
package liveness

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// Prefix holds one key per live node; its value is the lease id.
const Prefix = "/nodus/liveness/"

// Tracker keeps nodes alive. It is safe for concurrent use, and several
// server replicas may share the keys: a replica that does not know a node's
// lease reads it from the key.
type Tracker struct {
	client  *clientv3.Client
	ttl     time.Duration
	streams *streams

	mu     sync.Mutex
	leases map[string]heard
	swept  time.Time // when forget last dropped dead nodes' beats
}

// heard is what this replica knows of a node's liveness: the lease its key
// lives on (0 once it expired), and when this replica last renewed it for
// a beat.
type heard struct {
	lease clientv3.LeaseID
	at    time.Time
}

// New returns a tracker whose nodes die ttl after their last beat. leases
// is the lease service of client's etcd, on which the tracker keeps its
// keep-alive streams: LeaseService(client) for a client over the network.
func New(client *clientv3.Client, leases pb.LeaseClient, ttl time.Duration) *Tracker {
	return &Tracker{client: client, ttl: ttl, streams: newStreams(client, leases), leases: map[string]heard{}}
}

// LeaseService is the lease service on client's gRPC connection.
func LeaseService(client *clientv3.Client) pb.LeaseClient {
	return pb.NewLeaseClient(client.ActiveConnection())
}

// Beat records a heartbeat of node. revived says that the node was not alive
// before this beat.
func (t *Tracker) Beat(ctx context.Context, node string) (revived bool, err error) {
	t.mu.Lock()
	lease := t.leases[node].lease
	t.mu.Unlock()
	known := lease != 0
	if !known {
		resp, err := t.client.Get(ctx, Prefix+node)
		if err != nil {
			return false, err
		}
		if len(resp.Kvs) > 0 {
			if id, err := strconv.ParseInt(string(resp.Kvs[0].Value), 16, 64); err == nil {
				lease, known = clientv3.LeaseID(id), true
			}
		}
	}
	if known {
		err := t.keepAlive(ctx, lease)
		if err == nil {
			t.remember(node, lease)
			return false, nil
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return false, err
		}
	}
	return t.revive(ctx, node)
}

// revive puts node's key on a new lease, unless another replica did since
// this one found it gone: then it renews that lease. A key put over
// another replica's would live on a lease that only this replica renews,
// and the node would die a TTL later while its agent beats the other.
// A key on no lease, or on one that is gone, is replaced — only as it was
// read.
func (t *Tracker) revive(ctx context.Context, node string) (revived bool, err error) {
	grant, err := t.client.Grant(ctx, int64(t.ttl.Seconds()))
	if err != nil {
		return false, err
	}
	adopted := false
	defer func() {
		if adopted || err != nil {
			// The grant holds no key; if the revoke fails it expires.
			_, _ = t.client.Revoke(ctx, grant.ID)
		}
	}()
	key := Prefix + node
	value := strconv.FormatInt(int64(grant.ID), 16)
	absent := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	for range 3 {
		resp, err := t.client.Txn(ctx).If(absent).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(grant.ID))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return false, err
		}
		if resp.Succeeded {
			t.remember(node, grant.ID)
			return true, nil
		}
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		if kv.Lease != 0 {
			err := t.keepAlive(ctx, clientv3.LeaseID(kv.Lease))
			if err == nil {
				t.remember(node, clientv3.LeaseID(kv.Lease))
				adopted = true
				return false, nil
			}
			if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return false, err
			}
		}
		replaced, err := t.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(grant.ID))).Commit()
		if err != nil {
			return false, err
		}
		if replaced.Succeeded {
			t.remember(node, grant.ID)
			return true, nil
		}
	}
	return false, fmt.Errorf("liveness of node %s: its key changed under three tries to revive it", node)
}

// keepAlive renews lease over the long-lived streams, and with
// KeepAliveOnce (a stream of its own, with clientv3's retries) when a stream
// broke under it.
func (t *Tracker) keepAlive(ctx context.Context, lease clientv3.LeaseID) error {
	ttl, err := t.streams.keepAlive(ctx, lease)
	if err != nil && ctx.Err() == nil {
		_, err = t.client.KeepAliveOnce(ctx, lease)
		return err
	}
	if err == nil && ttl <= 0 {
		return rpctypes.ErrLeaseNotFound
	}
	return err
}

// Alive says whether node beat within the TTL.
func (t *Tracker) Alive(ctx context.Context, node string) (bool, error) {
	resp, err := t.client.Get(ctx, Prefix+node, clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	return resp.Count > 0, nil
}

// AliveSet is the set of nodes that beat within the TTL, read in one range.
func (t *Tracker) AliveSet(ctx context.Context) (map[string]bool, error) {
	resp, err := t.client.Get(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	alive := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		alive[strings.TrimPrefix(string(kv.Key), Prefix)] = true
	}
	return alive, nil
}

// WatchDeaths calls died for every node whose key expires, until ctx ends.
// This replica forgets the node's lease, not yet its last beat (LastBeat).
// A watch that ends (etcd compacted past it, a lost connection) is opened
// again where it stopped, or from now when that is compacted.
func (t *Tracker) WatchDeaths(ctx context.Context, died func(node string)) {
	var from int64
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut()}
		if from > 0 {
			opts = append(opts, clientv3.WithRev(from))
		}
		watching, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range t.client.Watch(watching, Prefix, opts...) {
			if resp.CompactRevision > 0 {
				klog.InfoS("node liveness: deaths since the watch's last revision were compacted away; watching from now", "compacted", resp.CompactRevision)
				from = 0
				break
			}
			if err := resp.Err(); err != nil {
				klog.InfoS("node liveness: the watch of deaths ended", "err", err)
				break
			}
			for _, ev := range resp.Events {
				node := strings.TrimPrefix(string(ev.Kv.Key), Prefix)
				t.forget(node)
				died(node)
			}
			from = resp.Header.Revision + 1
		}
		stop() // a watch left by a break ends with it
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// forget forgets node's lease, and the last beats of nodes that died long
// ago: whoever records a death has done so, and nodes deleted since leave
// nothing behind.
func (t *Tracker) forget(node string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.leases[node]; ok {
		t.leases[node] = heard{at: h.at}
	}
	if now.Sub(t.swept) < forgetAfter*t.ttl {
		return
	}
	t.swept = now
	for n, h := range t.leases {
		if h.lease == 0 && now.Sub(h.at) > forgetAfter*t.ttl {
			delete(t.leases, n)
		}
	}
}

// forgetAfter is how many TTLs a dead node's last beat is kept.
const forgetAfter = 10

// LastBeat is when this replica last renewed node's lease for a beat, the
// zero time when it heard none since it started. A beat another replica
// took may be later.
func (t *Tracker) LastBeat(node string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leases[node].at
}

func (t *Tracker) remember(node string, lease clientv3.LeaseID) {
	now := time.Now()
	t.mu.Lock()
	t.leases[node] = heard{lease: lease, at: now}
	t.mu.Unlock()
}
