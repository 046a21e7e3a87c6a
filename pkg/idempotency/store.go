// Package idempotency keeps Idempotency-Key records in etcd, so that a retried
// action returns its first answer on every server replica and across
// restarts. A record is created "in flight" on a short lease, atomically (the
// first of concurrent requests wins), and replaced by the final answer on a
// 24-hour lease.
package idempotency

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
	// InFlightTTL bounds how long a crashed request blocks its key.
	InFlightTTL time.Duration
	// TTL is how long final answers are kept.
	TTL time.Duration
}

// NewStore returns a store with the contract's lifetimes: answers kept 24 h,
// an abandoned in-flight record released after a minute.
func NewStore(client *clientv3.Client) *Store {
	return &Store{Client: client, Prefix: Prefix, InFlightTTL: time.Minute, TTL: 24 * time.Hour}
}

// Begin claims key for a request with fingerprint. It returns the existing
// record when the key is taken, or nil when this request now owns it.
func (s *Store) Begin(ctx context.Context, key, fingerprint string) (*Record, error) {
	lease, err := s.Client.Grant(ctx, int64(s.InFlightTTL.Seconds()))
	if err != nil {
		return nil, err
	}
	data, _ := json.Marshal(Record{Fingerprint: fingerprint, State: stateInFlight, StartedAt: time.Now().UTC()})
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

// Finish stores the final answer of key for TTL.
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
	_, err = s.Client.Put(ctx, s.Prefix+key, string(data), clientv3.WithLease(lease.ID))
	return err
}

// Abandon releases key, so that the request can be retried with it.
func (s *Store) Abandon(ctx context.Context, key string) error {
	_, err := s.Client.Delete(ctx, s.Prefix+key)
	return err
}
