package liveness

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// streams is a few long-lived LeaseKeepAlive streams that carry the
// heartbeats' keep-alives. clientv3's KeepAliveOnce opens a new gRPC stream
// for every call, and at thousands of beats a second opening and closing
// those streams cost more than the keep-alives. etcd answers the requests
// of one stream in their order, so each stream keeps its waiters in a queue.
type streams struct {
	client *clientv3.Client
	leases pb.LeaseClient
	next   atomic.Uint32
	pool   [streamCount]keepAliveStream
}

// streamCount spreads the keep-alives over a few streams, as etcd renews the
// leases of one stream one after the other.
const streamCount = 4

// errStreamBroken says a keep-alive's stream ended before its answer came;
// the caller retries with KeepAliveOnce, which has clientv3's retries.
var errStreamBroken = errors.New("the keep-alive stream ended")

type keepAliveStream struct {
	// send orders the requests on the stream, and opens it. It is not mu:
	// a Send can wait for etcd to read, etcd's reads wait for its answers
	// to be taken, and the receiver takes them under mu (an in-process
	// stream waits at once; a gRPC one when its flow-control window fills).
	send    sync.Mutex
	mu      sync.Mutex // guards the fields below
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	waiters []chan int64 // the TTL of each answer; -1 when the stream broke
}

func newStreams(client *clientv3.Client, leases pb.LeaseClient) *streams {
	return &streams{client: client, leases: leases}
}

// keepAlive renews lease once and returns its new TTL (0 or less: no such lease).
func (s *streams) keepAlive(ctx context.Context, lease clientv3.LeaseID) (int64, error) {
	ks := &s.pool[s.next.Add(1)%streamCount]
	answer := make(chan int64, 1)
	ks.send.Lock()
	ks.mu.Lock()
	if ks.stream == nil {
		if err := ks.open(s.client, s.leases); err != nil {
			ks.mu.Unlock()
			ks.send.Unlock()
			return 0, err
		}
	}
	// The waiter is queued before its request goes out, so that the
	// receiver finds it however soon the answer comes.
	ks.waiters = append(ks.waiters, answer)
	stream := ks.stream
	ks.mu.Unlock()
	err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(lease)})
	if err != nil {
		ks.mu.Lock()
		if ks.stream == stream {
			ks.breakLocked() // answers this waiter too
		}
		ks.mu.Unlock()
	}
	ks.send.Unlock()
	if err != nil {
		return 0, errStreamBroken
	}
	select {
	case ttl := <-answer:
		if ttl == -1 {
			return 0, errStreamBroken
		}
		return ttl, nil
	case <-ctx.Done():
		// The answer, when it comes, goes into the buffered channel unread.
		return 0, ctx.Err()
	}
}

// open starts a stream and its receiver; ks.send and ks.mu are held. The stream ends
// with the client.
func (ks *keepAliveStream) open(client *clientv3.Client, leases pb.LeaseClient) error {
	ctx, cancel := context.WithCancel(client.Ctx())
	stream, err := leases.LeaseKeepAlive(ctx)
	if err != nil {
		cancel()
		return err
	}
	ks.stream, ks.cancel = stream, cancel
	go ks.receive(stream)
	return nil
}

func (ks *keepAliveStream) receive(stream pb.Lease_LeaseKeepAliveClient) {
	for {
		resp, err := stream.Recv()
		ks.mu.Lock()
		if ks.stream != stream {
			ks.mu.Unlock()
			return // broken and replaced; its waiters were told
		}
		if err != nil {
			ks.breakLocked()
			ks.mu.Unlock()
			return
		}
		if len(ks.waiters) > 0 {
			w := ks.waiters[0]
			ks.waiters[0] = nil
			ks.waiters = ks.waiters[1:]
			ttl := resp.TTL
			if ttl < 0 {
				ttl = 0
			}
			w <- ttl
		}
		ks.mu.Unlock()
	}
}

// breakLocked ends the stream and answers its waiters that it broke; ks.mu is held.
func (ks *keepAliveStream) breakLocked() {
	if ks.cancel != nil {
		ks.cancel()
	}
	for _, w := range ks.waiters {
		w <- -1
	}
	ks.stream, ks.cancel, ks.waiters = nil, nil, nil
}
