// Package idempotency keeps Idempotency-Key records in etcd, so that a retried
// action returns its first answer on every server replica and across
// restarts. A record is created "in flight" on a short lease, atomically (the
// first of concurrent requests wins), renewed while its request runs, and
// replaced by the final answer on a 24-hour lease. An in-flight record names the replica process running it:
// a retry takes over at once a record whose process is gone (the replica
// restarted, its port refuses connections, or its registration lapsed),
// rather than waiting for the record's lease; the action itself must then recognise an effect
// the cut request left (see actions.RequestKey).
package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	stateInFlight = "in-flight"
	stateDone     = "done"
)

// Record is what etcd keeps for one key.
type Record struct {
	Fingerprint string            `json:"fingerprint"`
	State       string            `json:"state"`
	StartedAt   time.Time         `json:"startedAt"`
	Code        int               `json:"code,omitempty"`
	Header      map[string]string `json:"header,omitempty"`
	Body        []byte            `json:"body,omitempty"`
	RequestID   string            `json:"requestId,omitempty"`
	// Fix is the first answer's fix for the caller, when it failed with
	// one of its own (the error body's fix comes from the request's
	// exchange as the answer is written).
	Fix string `json:"fix,omitempty"`
	// Owner is the replica process running an in-flight request: its
	// replica ID and its boot, as Register put them.
	Owner string `json:"owner,omitempty"`

	revision int64 // etcd's mod revision of the record
}

// InFlight says whether the first request is still running.
func (r *Record) InFlight() bool { return r.State == stateInFlight }

// Prefix is where records are kept; those of a project's objects under the
// project's name (see actions.ScopeKey).
const Prefix = "/nodus/idempotency/"

// Store reads and writes records under Prefix.
type Store struct {
	Client *clientv3.Client
	Prefix string
	// InFlightTTL bounds how long a crashed request blocks its key when
	// its replica's registration cannot tell.
	InFlightTTL time.Duration
	// TTL is how long final answers are kept.
	TTL time.Duration
	// ReplicaTTL is how long a replica that stopped without a word (kill
	// -9) still counts as running its in-flight requests, unless it
	// restarts first.
	ReplicaTTL time.Duration

	owner string // "replica/boot" of this process, once registered
	// registered is this process' registration: its key and entry, to
	// mark it draining.
	registered struct{ key, entry string }

	mu sync.Mutex
	// claims are the leases of the in-flight records this process holds:
	// Abandon revokes a record's own lease, which cannot touch a later
	// record of the same key.
	claims map[string]claim
}

// claim is the lease of an in-flight record this process holds, and when
// etcd ends it by itself unless renewed.
type claim struct {
	lease   clientv3.LeaseID
	expires time.Time
	// stop ends the renewals of the lease.
	stop context.CancelFunc
}

// keepInFlightFor bounds how long a running request's record is renewed:
// a handler that never returns (a bug) blocks its key no longer than this
// and a lease after it.
const keepInFlightFor = 15 * time.Minute

// NewStore returns a store with the contract's lifetimes: answers kept 24 h,
// an abandoned in-flight record released after a minute, or five seconds
// after its replica stopped.
func NewStore(client *clientv3.Client) *Store {
	return &Store{Client: client, Prefix: Prefix, InFlightTTL: time.Minute, TTL: 24 * time.Hour, ReplicaTTL: 5 * time.Second}
}

// replicasPrefix keeps each replica's current boot, on a short lease.
const replicasPrefix = "/nodus/replicas/"

// registration is what replicasPrefix keeps for one replica.
type registration struct {
	Boot string `json:"boot"`
	// Address is where the replica listens (host:port), for a peer to
	// tell at once that its process is gone; "" when it cannot be reached
	// by a known address, and its lease decides.
	Address string `json:"address,omitempty"`
	// Draining: the replica stopped taking requests and finishes those it
	// runs. Its port no longer answers, yet its in-flight requests are not
	// cut: its lease decides, which it keeps until they are done.
	Draining bool `json:"draining,omitempty"`
}

// Register records this process as the running boot of replica (an ID
// that stays across its restarts), listening at address, replacing an
// earlier boot's entry at once, and keeps it alive until ctx ends. Call it
// before serving.
func (s *Store) Register(ctx context.Context, replica, address string) error {
	boot := uuid.NewString()
	entry, _ := json.Marshal(registration{Boot: boot, Address: address})
	alive, err := s.register(ctx, replica, string(entry))
	if err != nil {
		return err
	}
	s.owner = replica + "/" + boot
	s.registered.key, s.registered.entry = replicasPrefix+replica, string(entry)
	go func() {
		for {
			for range alive {
			}
			// The keep-alive ended: ctx is done, or etcd lost the lease
			// (a long partition). Register again while the server runs.
			for ctx.Err() == nil {
				if alive, err = s.register(ctx, replica, string(entry)); err == nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return nil
}

// Drain marks this process' registration draining: from now on its port
// may refuse connections while it finishes the requests it runs, and no
// peer takes their keys over while its registration lives. Call it when
// the server stops taking requests, and end Register's context once the
// last request is done.
func (s *Store) Drain(ctx context.Context) error {
	if s.registered.key == "" {
		return nil
	}
	var r registration
	if err := json.Unmarshal([]byte(s.registered.entry), &r); err != nil {
		return err
	}
	r.Draining = true
	entry, _ := json.Marshal(r)
	// Only the entry this process wrote, on the lease it keeps: a later
	// boot's is not this one's to mark.
	_, err := s.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(s.registered.key), "=", s.registered.entry)).
		Then(clientv3.OpPut(s.registered.key, string(entry), clientv3.WithIgnoreLease())).
		Commit()
	return err
}

func (s *Store) register(ctx context.Context, replica, entry string) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	lease, err := s.Client.Grant(ctx, int64(s.ReplicaTTL.Seconds()))
	if err != nil {
		return nil, err
	}
	if _, err := s.Client.Put(ctx, replicasPrefix+replica, entry, clientv3.WithLease(lease.ID)); err != nil {
		return nil, err
	}
	return s.Client.KeepAlive(ctx, lease.ID)
}

// probeTimeout bounds the look at a peer replica's port; a peer that does
// not answer in time counts as running, and its lease decides.
const probeTimeout = 500 * time.Millisecond

// ownerRuns says whether the process named by owner still runs: its boot
// is the replica's registered one and, where the replica registered an
// address, something still listens there. A refused connection means the
// process is gone (kill -9, a crash) even while its registration has not
// lapsed yet; a peer that cannot be reached at all may be partitioned,
// not dead, and is waited for.
func (s *Store) ownerRuns(ctx context.Context, owner string) (bool, error) {
	replica, boot, ok := strings.Cut(owner, "/")
	if !ok {
		return true, nil // a record from before owners: its lease decides
	}
	if owner == s.owner {
		return true, nil // this process: the request is still running here
	}
	resp, err := s.Client.Get(ctx, replicasPrefix+replica)
	if err != nil {
		return false, err
	}
	if len(resp.Kvs) != 1 {
		return false, nil
	}
	var r registration
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		r = registration{Boot: string(resp.Kvs[0].Value)} // a replica of the version before addresses
	}
	if r.Boot != boot {
		return false, nil
	}
	if r.Address == "" || r.Draining {
		return true, nil
	}
	conn, err := (&net.Dialer{Timeout: probeTimeout}).DialContext(ctx, "tcp", r.Address)
	if err == nil {
		conn.Close()
		return true, nil
	}
	return !errors.Is(err, syscall.ECONNREFUSED), nil
}

// TakeOver claims the in-flight record r of key for this request when the
// process that began it no longer runs: its request was cut, and runs
// again here. It reports whether this request now owns the key.
func (s *Store) TakeOver(ctx context.Context, key string, r *Record) (bool, error) {
	runs, err := s.ownerRuns(ctx, r.Owner)
	if err != nil || runs {
		return false, err
	}
	lease, err := s.Client.Grant(ctx, int64(s.InFlightTTL.Seconds()))
	if err != nil {
		return false, err
	}
	data, _ := json.Marshal(Record{Fingerprint: r.Fingerprint, State: stateInFlight, StartedAt: time.Now().UTC(), Owner: s.owner})
	k := s.Prefix + key
	resp, err := s.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", r.revision)).
		Then(clientv3.OpPut(k, string(data), clientv3.WithLease(lease.ID))).
		Commit()
	if err != nil {
		return false, err
	}
	if !resp.Succeeded {
		_, _ = s.Client.Revoke(ctx, lease.ID)
		return false, nil
	}
	s.hold(key, lease)
	return true, nil
}

// Begin claims key for a request with fingerprint. It returns the existing
// record when the key is taken, or nil when this request now owns it.
func (s *Store) Begin(ctx context.Context, key, fingerprint string) (*Record, error) {
	lease, err := s.Client.Grant(ctx, int64(s.InFlightTTL.Seconds()))
	if err != nil {
		return nil, err
	}
	data, _ := json.Marshal(Record{Fingerprint: fingerprint, State: stateInFlight, StartedAt: time.Now().UTC(), Owner: s.owner})
	k := s.Prefix + key
	resp, err := s.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(data), clientv3.WithLease(lease.ID))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return nil, err
	}
	if resp.Succeeded {
		s.hold(key, lease)
		return nil, nil
	}
	_, _ = s.Client.Revoke(ctx, lease.ID)
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		// Expired between the compare and the read: the caller may retry.
		return &Record{Fingerprint: fingerprint, State: stateInFlight}, nil
	}
	var existing Record
	if err := json.Unmarshal(kvs[0].Value, &existing); err != nil {
		return nil, fmt.Errorf("idempotency record %s is corrupt: %w", k, err)
	}
	existing.revision = kvs[0].ModRevision
	return &existing, nil
}

// Get reads key's record, nil when there is none.
func (s *Store) Get(ctx context.Context, key string) (*Record, error) {
	resp, err := s.Client.Get(ctx, s.Prefix+key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return nil, fmt.Errorf("idempotency record %s is corrupt: %w", s.Prefix+key, err)
	}
	r.revision = resp.Kvs[0].ModRevision
	return &r, nil
}

// Count is how many records are kept under prefix.
func (s *Store) Count(ctx context.Context, prefix string) (int64, error) {
	resp, err := s.Client.Get(ctx, s.Prefix+prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// Finish stores the final answer of key for TTL, in place of this
// process's in-flight record, or where no record is left. A record of
// another request (one that claimed the key after this one's record ended,
// its lease not renewed: etcd unreachable) keeps its place: its answer is
// the key's.
func (s *Store) Finish(ctx context.Context, key string, r Record) error {
	lease, err := s.Client.Grant(ctx, int64(s.TTL.Seconds()))
	if err != nil {
		return err
	}
	r.State = stateDone
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	k := s.Prefix + key
	put := clientv3.OpPut(k, string(data), clientv3.WithLease(lease.ID))
	ours := clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
	if c, held := s.claimOf(key); held {
		ours = clientv3.Compare(clientv3.LeaseValue(k), "=", c.lease)
	}
	resp, err := s.Client.Txn(ctx).If(ours).Then(put).Commit()
	if err == nil && !resp.Succeeded {
		// Not this process's record: ended, and maybe claimed since.
		resp, err = s.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(put).Commit()
	}
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		_, _ = s.Client.Revoke(ctx, lease.ID)
	}
	s.release(key) // the answer's lease holds the record now, or another's
	return nil
}

// Abandon releases key, so that the request can be retried with it. The
// in-flight record this process holds goes with its own lease, so a late
// release cannot remove a record that replaced it; etcd refusing the
// revocation (while it elects a leader, or a connection is lost) is
// retried until it takes it, ctx ends, or the lease has expired by itself.
// A key this process does not hold (an answer, a crashed replica's record)
// is deleted.
func (s *Store) Abandon(ctx context.Context, key string) error {
	c, held := s.release(key) // renewals stop: the lease ends by c.expires
	if !held {
		_, err := s.Client.Delete(ctx, s.Prefix+key)
		return err
	}
	ctx, cancel := context.WithDeadline(ctx, c.expires)
	defer cancel()
	for wait := abandonRetry; ; wait = min(2*wait, maxAbandonRetry) {
		_, err := s.Client.Revoke(ctx, c.lease)
		if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			if time.Now().After(c.expires) {
				return nil // etcd ended the lease, and the record, by itself
			}
			return fmt.Errorf("releasing idempotency key %s: %w", key, err)
		case <-time.After(wait):
		}
	}
}

// The first retry of a refused release comes soon (a leader election takes
// about a second), later ones less often.
const (
	abandonRetry    = 100 * time.Millisecond
	maxAbandonRetry = 2 * time.Second
)

// hold remembers the lease of key's in-flight record, now this process's,
// and renews it while the request runs (up to keepInFlightFor): an action
// that takes longer than the lease would otherwise lose its record, and a
// retry would run it a second time beside it.
func (s *Store) hold(key string, lease *clientv3.LeaseGrantResponse) {
	ttl := time.Duration(lease.TTL) * time.Second
	renewing, stop := context.WithTimeout(context.Background(), keepInFlightFor)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claims == nil {
		s.claims = map[string]claim{}
	}
	now := time.Now()
	// A request that ended without Finish, Abandon or Release leaves its
	// claim, renewed until keepInFlightFor.
	for k, c := range s.claims {
		if now.After(c.expires.Add(keepInFlightFor)) {
			c.stop()
			delete(s.claims, k)
		}
	}
	if earlier, ok := s.claims[key]; ok {
		// An earlier request's, whose record ended anyway (its renewals
		// failed): it holds nothing now.
		earlier.stop()
	}
	s.claims[key] = claim{lease: lease.ID, expires: now.Add(ttl), stop: stop}
	go s.renew(renewing, key, lease.ID, ttl)
}

// renew keeps lease alive, a third of its TTL apart, until ctx ends.
func (s *Store) renew(ctx context.Context, key string, lease clientv3.LeaseID, ttl time.Duration) {
	tick := time.NewTicker(max(ttl/3, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := s.Client.KeepAliveOnce(ctx, lease); err != nil {
			continue // tried again at the next tick, while the lease lasts
		}
		s.mu.Lock()
		if c, held := s.claims[key]; held && c.lease == lease {
			c.expires = time.Now().Add(ttl)
			s.claims[key] = c
		}
		s.mu.Unlock()
	}
}

// Release stops renewing key's in-flight record, which then ends with its
// lease: for a request that ended with neither Finish nor Abandon (its
// handler panicked). After either, it does nothing.
func (s *Store) Release(key string) { s.release(key) }

// claimOf returns key's claim, if this process holds one.
func (s *Store) claimOf(key string) (claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, held := s.claims[key]
	return c, held
}

// release forgets key's claim, its renewals stopped, and returns it, if
// this process held one.
func (s *Store) release(key string) (claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, held := s.claims[key]
	if held {
		c.stop()
	}
	delete(s.claims, key)
	return c, held
}
