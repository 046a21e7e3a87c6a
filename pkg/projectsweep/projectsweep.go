// Package projectsweep deletes what an earlier project of a name left
// behind. A deleted project is emptied (its executions listed and deleted)
// and then let go; an execution admitted while it still stood can land
// after that list, with its output, and a project made later under the name
// (another customer's) would show it. Nothing of a project's own predates
// it: every write into its namespace needs the project. So what is there
// with an etcd key made before the project's is an earlier project's.
package projectsweep

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// Layout is where a project's data is in etcd.
type Layout struct {
	// Projects is the key prefix of Projects; the name follows.
	Projects string
	// Namespaced are the key prefixes of the kinds that live in a
	// project's namespace, and of the data kept outside objects (execution
	// logs, idempotency records); the project's name and "/" follow each.
	Namespaced []string
}

// Sweep deletes every key of the project's namespace and data made before
// madeAt, the create revision of the project's key. A key made again since
// is left: it is the project's own.
func Sweep(ctx context.Context, kv clientv3.KV, layout Layout, project string, madeAt int64) error {
	for _, prefix := range layout.Namespaced {
		keys, err := kv.Get(ctx, prefix+project+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(madeAt-1))
		if err != nil {
			return err
		}
		for _, k := range keys.Kvs {
			if _, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(string(k.Key)), "=", k.CreateRevision)).
				Then(clientv3.OpDelete(string(k.Key))).Commit(); err != nil {
				return err
			}
			klog.InfoS("deleted what an earlier project of the name left", "project", project, "key", string(k.Key))
		}
	}
	return nil
}

// SweepUnmade deletes every key of the project's namespace and data while
// the project's key does not exist: what is there then is an earlier
// project's. Swept before a project of the name is made, its deletions are
// history from before the project, which no member's read or watch reaches
// (package projecthistory); swept after, as Sweep does, a member's list at
// the project's first revision, or a watch from it replaying the
// deletions, showed the earlier project's objects. It stops, with no
// error, once the project exists: a creation that raced it sweeps its own.
func SweepUnmade(ctx context.Context, kv clientv3.KV, layout Layout, project string) error {
	for _, prefix := range layout.Namespaced {
		keys, err := kv.Get(ctx, prefix+project+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return err
		}
		for _, k := range keys.Kvs {
			resp, err := kv.Txn(ctx).If(
				clientv3.Compare(clientv3.CreateRevision(layout.Projects+project), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(string(k.Key)), "=", k.CreateRevision),
			).Then(clientv3.OpDelete(string(k.Key))).Else(clientv3.OpGet(layout.Projects+project, clientv3.WithKeysOnly())).Commit()
			if err != nil {
				return err
			}
			if !resp.Succeeded {
				if made := resp.Responses[0].GetResponseRange().Kvs; len(made) > 0 {
					return nil // made meanwhile
				}
				continue // the key changed meanwhile: made again, or gone
			}
			klog.InfoS("deleted what an earlier project of the name left", "project", project, "key", string(k.Key))
		}
	}
	return nil
}

// MadeAt is the create revision of the project's key, 0 when there is none.
func MadeAt(ctx context.Context, kv clientv3.KV, layout Layout, project string) (int64, error) {
	resp, err := kv.Get(ctx, layout.Projects+project, clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	return resp.Kvs[0].CreateRevision, nil
}

// Predates says whether key was made in etcd before the project's key: what
// is stored under a project's name outside its namespace (a Reservation,
// cluster-scoped) and predates the project is an earlier project's. False
// when either key is missing.
func Predates(ctx context.Context, kv clientv3.KV, layout Layout, key, project string) (bool, error) {
	resp, err := kv.Txn(ctx).Then(clientv3.OpGet(key, clientv3.WithKeysOnly()), clientv3.OpGet(layout.Projects+project, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return false, err
	}
	thing, proj := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(thing) == 0 || len(proj) == 0 {
		return false, nil
	}
	return thing[0].CreateRevision < proj[0].CreateRevision, nil
}
