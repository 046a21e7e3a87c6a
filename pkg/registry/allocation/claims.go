package allocation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Claims make an allocation's Ironic name and its UUID unique in etcd,
// whichever API writes the allocation: an etcd key per name and per UUID,
// created only where none is (or where the one there is stale), naming the
// allocation that holds it. The object name cannot carry the uniqueness:
// an Ironic name may change, a UUID is not an object name, and an Ironic
// name need not be a valid object name.
const (
	NameClaims = "/nodus/allocation-names/"
	UUIDClaims = "/nodus/allocation-uuids/"
)

// claimGrace is how long a claim stands while its allocation does not
// hold it yet: the time between the claim and the write of the
// allocation (its creation or its rename). A claim older than that whose
// allocation does not hold it is stale: its write failed, or its server
// stopped between the two writes.
const claimGrace = time.Minute

// owner is the allocation a claim is for.
type owner struct {
	UID    string `json:"uid"`
	Object string `json:"object"` // metadata.name
	// At is when the claim was taken, unix seconds; 0 once released by
	// a rename: stale at once unless the allocation holds it again.
	At int64 `json:"at"`
}

func (o owner) same(p owner) bool { return o.UID == p.UID && o.Object == p.Object }

func nameClaim(name string) string { return NameClaims + name }
func uuidClaim(uid string) string  { return UUIDClaims + uid }

// claims takes and releases claims. holds says, from etcd (never a cache),
// whether the allocation o names still holds key: for a UUID, it exists
// with o's UID; for a name, it exists with that Ironic name, whichever
// create of the object name wrote it.
type claims struct {
	kv    clientv3.KV
	now   func() time.Time
	holds func(ctx context.Context, key string, o owner) (bool, error)
}

// takenError says that key is held by another allocation, holder.
type takenError struct {
	key    string
	holder owner
}

func (e *takenError) Error() string { return e.key + " is claimed by another allocation" }

// errClaimContended: the claims kept changing under the transactions.
var errClaimContended = errors.New("the allocation's name or UUID claims kept changing; retry")

const claimAttempts = 5

// read returns the owner of key and its mod revision (0: no claim).
func (c *claims) read(ctx context.Context, key string) (owner, int64, error) {
	resp, err := c.kv.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return owner{}, 0, err
	}
	var o owner
	if err := json.Unmarshal(resp.Kvs[0].Value, &o); err != nil {
		// Not a value of ours: treat it as a claim of nobody, stale.
		return owner{}, resp.Kvs[0].ModRevision, nil
	}
	return o, resp.Kvs[0].ModRevision, nil
}

// take claims every key for o, all or none, in one transaction. A key o
// holds already is taken again (its time renewed); another allocation's
// is refused with a *takenError while it is live.
func (c *claims) take(ctx context.Context, keys []string, o owner) error {
	return c.claim(ctx, keys, o, false)
}

// takeOver claims keys as take does, and also those that another create
// of o's object name holds, live or not. The caller has read from etcd
// that the object does not exist: that create's write failed without an
// answer, was lost, or is still in flight, and etcd creates the object's
// key once, so only one of the two creates writes it.
func (c *claims) takeOver(ctx context.Context, keys []string, o owner) error {
	return c.claim(ctx, keys, o, true)
}

func (c *claims) claim(ctx context.Context, keys []string, o owner, overSameObject bool) error {
	o.At = c.now().Unix()
	value, err := json.Marshal(o)
	if err != nil {
		return err
	}
	// Most names and UUIDs are new: one transaction that creates every
	// key where none is, before reading any.
	var fresh []clientv3.Cmp
	var creates []clientv3.Op
	for _, key := range keys {
		fresh = append(fresh, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
		creates = append(creates, clientv3.OpPut(key, string(value)))
	}
	if resp, err := c.kv.Txn(ctx).If(fresh...).Then(creates...).Commit(); err != nil {
		return fmt.Errorf("claiming %s: %w", strings.Join(keys, ", "), err)
	} else if resp.Succeeded {
		return nil
	}
	for range claimAttempts {
		var cmps []clientv3.Cmp
		var puts []clientv3.Op
		for _, key := range keys {
			held, rev, err := c.read(ctx, key)
			if err != nil {
				return err
			}
			if rev == 0 {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
			} else {
				if !held.same(o) && !(overSameObject && held.Object == o.Object) {
					live, err := c.live(ctx, key, held)
					if err != nil {
						return err
					}
					if live {
						return &takenError{key: key, holder: held}
					}
				}
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
			}
			puts = append(puts, clientv3.OpPut(key, string(value)))
		}
		resp, err := c.kv.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			return fmt.Errorf("claiming %s: %w", strings.Join(keys, ", "), err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return errClaimContended
}

// check is take without a write: whether another allocation's live claim
// holds any of keys, for a dry run, which must answer as the write would.
func (c *claims) check(ctx context.Context, keys []string, o owner) error {
	for _, key := range keys {
		held, rev, err := c.read(ctx, key)
		if err != nil {
			return err
		}
		if rev == 0 || held.same(o) {
			continue
		}
		live, err := c.live(ctx, key, held)
		if err != nil {
			return err
		}
		if live {
			return &takenError{key: key, holder: held}
		}
	}
	return nil
}

// live says whether another allocation's claim stands: it holds the key,
// or took it less than claimGrace ago and may be writing it now.
func (c *claims) live(ctx context.Context, key string, held owner) (bool, error) {
	if held.UID == "" {
		return false, nil
	}
	if held.At != 0 && c.now().Sub(time.Unix(held.At, 0)) < claimGrace {
		return true, nil
	}
	return c.holds(ctx, key, held)
}

// release gives up o's claims of keys that o does not hold (any more):
// deleted when o is gone for good (hard), else kept with time 0 (a rename
// leaves the name), so that a concurrent rename of o back to that name,
// which found the claim its own, still finds it when it has written.
func (c *claims) release(ctx context.Context, keys []string, o owner, hard bool) error {
	var errs []error
	for _, key := range keys {
		errs = append(errs, c.releaseOne(ctx, key, o, hard))
	}
	return errors.Join(errs...)
}

func (c *claims) releaseOne(ctx context.Context, key string, o owner, hard bool) error {
	for range claimAttempts {
		held, rev, err := c.read(ctx, key)
		if err != nil || rev == 0 || !held.same(o) || (!hard && held.At == 0) {
			return err
		}
		holds, err := c.holds(ctx, key, held)
		if err != nil || holds {
			return err
		}
		op := clientv3.OpDelete(key)
		if !hard {
			held.At = 0
			value, err := json.Marshal(held)
			if err != nil {
				return err
			}
			op = clientv3.OpPut(key, string(value))
		}
		resp, err := c.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(op).Commit()
		if err != nil || resp.Succeeded {
			return err
		}
	}
	return errClaimContended
}
