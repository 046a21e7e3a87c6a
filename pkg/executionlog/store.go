// Package executionlog keeps the bounded output of borrower executions in
// etcd, outside the Execution objects so that lists and watches stay small.
// Each log lives on the lease of its first write, for two weeks: executions
// run at most a week, so every log is kept at least a week after its
// execution ended, and goes with its Execution when that is deleted.
package executionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Log is the kept tail of an execution's output.
type Log struct {
	// Data is the tail, at most nodusv1.MaxExecutionLogBytes.
	Data []byte `json:"data"`
	// DroppedBytes is how much output came before Data and was not kept.
	DroppedBytes int64 `json:"droppedBytes,omitempty"`
	// Final marks the output of the report that ended the execution: no
	// output of an earlier report replaces it.
	Final bool `json:"final,omitempty"`
	// WrittenAt is when this replica stored it: the next output of a
	// running execution is stored only MinInterval later.
	WrittenAt time.Time `json:"writtenAt,omitempty"`
}

// Store reads and writes logs under Prefix.
type Store struct {
	Client *clientv3.Client
	Prefix string
	TTL    time.Duration
	// MinInterval is the least time between two stored outputs of a
	// running execution; 0 stores every one.
	MinInterval time.Duration

	// stored is when this replica last stored each log, so that an output
	// within MinInterval of it is dropped before the kept tail, up to
	// 342 KiB of JSON, is read and decoded only to learn that.
	storedMu   sync.Mutex
	stored     map[string]time.Time
	sweepAbove int
}

// Prefix is where logs are kept, each under its project's name.
const Prefix = "/nodus/executionlogs/"

// NewStore keeps logs under Prefix for two weeks, and a running
// execution's output at most every DefaultMinInterval.
func NewStore(client *clientv3.Client) *Store {
	return &Store{Client: client, Prefix: Prefix, TTL: 14 * 24 * time.Hour, MinInterval: DefaultMinInterval}
}

// DefaultMinInterval bounds how often a running execution's output is
// written: each write is the whole tail, up to 256 KiB, and every write is
// a revision etcd keeps until its compaction. Agents upload every 2 s;
// each upload carries the whole tail, so a skipped one loses nothing the
// next stored one does not carry, and the end's output is always stored.
const DefaultMinInterval = 5 * time.Second

// key includes the UID: a new execution of the same name never shows an old log.
func (s *Store) key(namespace, name string, uid types.UID) string {
	return s.Prefix + namespace + "/" + name + "/" + string(uid)
}

// Put replaces the log, trimming it to its last MaxExecutionLogBytes,
// unless the kept one is final: an output report still in flight when the
// end's report landed would replace the final output with an earlier one.
// A running execution's output is not stored again when it did not change,
// nor sooner than MinInterval after the last one stored.
func (s *Store) Put(ctx context.Context, namespace, name string, uid types.UID, log Log) error {
	key := s.key(namespace, name, uid)
	if !log.Final && s.storedWithin(key, s.MinInterval) {
		return nil
	}
	if over := len(log.Data) - nodusv1.MaxExecutionLogBytes; over > 0 {
		log.Data = log.Data[over:]
		log.DroppedBytes += int64(over)
	}
	log.WrittenAt = time.Now().UTC()
	data, err := json.Marshal(log)
	if err != nil {
		return err
	}
	var lease clientv3.LeaseID
	for {
		kept, err := s.Client.Get(ctx, key)
		if err != nil {
			return err
		}
		var unchanged clientv3.Cmp
		put := clientv3.OpPut(key, string(data), clientv3.WithIgnoreLease()) // one lease per log, not per write
		if len(kept.Kvs) == 0 {
			unchanged = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
			if lease == 0 {
				granted, err := s.Client.Grant(ctx, int64(s.TTL.Seconds()))
				if err != nil {
					return err
				}
				lease = granted.ID
			}
			put = clientv3.OpPut(key, string(data), clientv3.WithLease(lease))
		} else {
			var current Log
			if json.Unmarshal(kept.Kvs[0].Value, &current) == nil {
				switch {
				case current.Final:
					return nil
				case log.Final:
					// The end's output is always stored.
				case bytes.Equal(current.Data, log.Data) && current.DroppedBytes == log.DroppedBytes:
					return nil
				case log.WrittenAt.Sub(current.WrittenAt) < s.MinInterval && log.WrittenAt.After(current.WrittenAt.Add(-time.Minute)):
					// Stored a moment ago (a clock behind by more than a
					// minute does not hold the output back).
					return nil
				}
			}
			unchanged = clientv3.Compare(clientv3.ModRevision(key), "=", kept.Kvs[0].ModRevision)
		}
		resp, err := s.Client.Txn(ctx).If(unchanged).Then(put).Commit()
		if err == nil && resp.Succeeded && s.MinInterval > 0 {
			s.remember(key)
		}
		if err != nil || resp.Succeeded {
			return err
		}
		// Written meanwhile: look again.
	}
}

// storedWithin says whether this replica stored key less than d ago.
func (s *Store) storedWithin(key string, d time.Duration) bool {
	s.storedMu.Lock()
	defer s.storedMu.Unlock()
	at, ok := s.stored[key]
	return ok && time.Since(at) < d
}

// remember records that key was stored now. Entries older than
// MinInterval hold nothing back: they are dropped whenever the map has
// doubled since the last sweep.
func (s *Store) remember(key string) {
	s.storedMu.Lock()
	defer s.storedMu.Unlock()
	if s.stored == nil {
		s.stored = map[string]time.Time{}
	}
	s.stored[key] = time.Now()
	if len(s.stored) > max(s.sweepAbove, 1024) {
		for k, at := range s.stored {
			if time.Since(at) >= s.MinInterval {
				delete(s.stored, k)
			}
		}
		s.sweepAbove = 2 * len(s.stored)
	}
}

// Get returns the log, or an empty one when nothing was written.
func (s *Store) Get(ctx context.Context, namespace, name string, uid types.UID) (Log, error) {
	resp, err := s.Client.Get(ctx, s.key(namespace, name, uid))
	if err != nil || len(resp.Kvs) == 0 {
		return Log{}, err
	}
	var log Log
	err = json.Unmarshal(resp.Kvs[0].Value, &log)
	return log, err
}

// Delete removes the log of the execution with this UID, with its
// Execution: a borrower that deletes its ended executions and runs new
// ones must not pile up their outputs for two weeks.
func (s *Store) Delete(ctx context.Context, namespace, name string, uid types.UID) error {
	_, err := s.Client.Delete(ctx, s.key(namespace, name, uid))
	return err
}

// Count counts the logs kept for a project's executions, as etcd has them now.
func (s *Store) Count(ctx context.Context, namespace string) (int, error) {
	resp, err := s.Client.Get(ctx, s.Prefix+namespace+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}
