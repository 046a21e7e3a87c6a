package server

import (
	"context"
	"fmt"
	"reflect"

	etcdclient "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	genericapiserver "k8s.io/apiserver/pkg/server"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/executionlog"
	"github.com/nodus-dev/nodus/pkg/localinformers"
	"github.com/nodus-dev/nodus/pkg/registry/accesstoken"
	"github.com/nodus-dev/nodus/pkg/registry/allocation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/registry/enrollmenttoken"
	"github.com/nodus-dev/nodus/pkg/registry/execution"
	"github.com/nodus-dev/nodus/pkg/registry/hostlending"
	"github.com/nodus-dev/nodus/pkg/registry/node"
	"github.com/nodus-dev/nodus/pkg/registry/pool"
	"github.com/nodus-dev/nodus/pkg/registry/project"
	"github.com/nodus-dev/nodus/pkg/registry/reservation"
	"github.com/nodus-dev/nodus/pkg/registry/reservedhost"
)

// Stores are the storages of every nodus.dev resource.
type Stores struct {
	Projects, Pools, Nodes, Allocations, Reservations, ReservedHosts base.Stores
	AccessTokens, EnrollmentTokens, Executions, HostLendings         base.Stores
}

func newStores(scheme *runtime.Scheme, generic *genericapiserver.Config) (*Stores, error) {
	s := &Stores{}
	for _, r := range []struct {
		into *base.Stores
		kind base.Kind
	}{
		{&s.Projects, project.Kind()}, {&s.Pools, pool.Kind()}, {&s.Nodes, node.Kind()}, {&s.Allocations, allocation.Kind()},
		{&s.Reservations, reservation.Kind()}, {&s.ReservedHosts, reservedhost.Kind()}, {&s.AccessTokens, accesstoken.Kind()},
		{&s.EnrollmentTokens, enrollmenttoken.Kind()}, {&s.Executions, execution.Kind()}, {&s.HostLendings, hostlending.Kind()},
	} {
		store, err := base.NewStore(scheme, generic.RESTOptionsGetter, r.kind)
		if err != nil {
			return nil, fmt.Errorf("storage for %s: %w", r.kind.Resource, err)
		}
		*r.into = store
	}
	return s, nil
}

// noStoreChangesReads refuses a store that changes what it reads on the
// way out (the library's Decorator, which may change an object per
// request): a JSON LIST writes each item from a cache of its JSON by UID
// and resourceVersion (package jsonlist), which holds only while every
// caller is sent the object as stored.
func noStoreChangesReads(s *Stores) error {
	v := reflect.ValueOf(s).Elem()
	for i := range v.NumField() {
		stores, ok := v.Field(i).Interface().(base.Stores)
		if !ok {
			continue
		}
		for _, store := range []*genericregistry.Store{stores.Main, stores.Status} {
			if store != nil && store.Decorator != nil {
				return fmt.Errorf("the storage of %s has a Decorator: a JSON LIST would send every caller the JSON of the first it was written for (package jsonlist)", v.Type().Field(i).Name)
			}
		}
	}
	return nil
}

// Sources are the stores the in-process informers read, by object type.
func (s *Stores) Sources() localinformers.Sources {
	return localinformers.Sources{
		reflect.TypeFor[*nodusv1.Project](): s.Projects.Main, reflect.TypeFor[*nodusv1.Pool](): s.Pools.Main,
		reflect.TypeFor[*nodusv1.Node](): s.Nodes.Main, reflect.TypeFor[*nodusv1.Allocation](): s.Allocations.Main,
		reflect.TypeFor[*nodusv1.Reservation](): s.Reservations.Main, reflect.TypeFor[*nodusv1.ReservedHost](): s.ReservedHosts.Main,
		reflect.TypeFor[*nodusv1.AccessToken](): s.AccessTokens.Main, reflect.TypeFor[*nodusv1.EnrollmentToken](): s.EnrollmentTokens.Main,
		reflect.TypeFor[*nodusv1.Execution](): s.Executions.Main, reflect.TypeFor[*nodusv1.HostLending](): s.HostLendings.Main,
	}
}

// getters read for authentication, authorization and admission.
func (s *Stores) getters() storeGetters {
	return storeGetters{projects: s.Projects.Main, tokens: s.AccessTokens.Main, enrollments: s.EnrollmentTokens.Main,
		nodes: s.Nodes.Main, pools: s.Pools.Main, reservations: s.Reservations.Main}
}

// storeGetters read Projects, AccessTokens, EnrollmentTokens, Nodes, Pools
// and Reservations for authentication, authorization and admission straight
// from the stores.
type storeGetters struct {
	projects, tokens, enrollments, nodes, pools, reservations *genericregistry.Store
}

// keptExecutions counts what a project keeps of its executions: its
// Executions, or the outputs kept for them where those are more (an output
// whose Execution's delete did not reach it stays on its lease).
type keptExecutions struct {
	kv   etcdclient.KV
	logs *executionlog.Store
}

// CountExecutions counts in etcd, as it is now: from whatever the watch
// cache had, the 21st of 21 executions created one after another could
// pass a bound of 20. A count, not a consistent LIST, which copied each of
// the project's executions (up to the bound, 1000) on every create.
func (k keptExecutions) CountExecutions(ctx context.Context, project string) (int, error) {
	stored, err := k.kv.Get(ctx, etcdPrefix+"/"+nodusv1.GroupName+"/executions/"+project+"/", etcdclient.WithPrefix(), etcdclient.WithCountOnly())
	if err != nil {
		return 0, err
	}
	executions := int(stored.Count)
	logs, err := k.logs.Count(ctx, project)
	if err != nil {
		return 0, err
	}
	return max(executions, logs), nil
}

// GetReservation reads from the watch cache or, when fresh, from etcd.
func (g storeGetters) GetReservation(ctx context.Context, name string, fresh bool) (*nodusv1.Reservation, error) {
	obj, err := g.reservations.Get(ctx, name, readOptions(fresh))
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Reservation), nil
}

// GetPool reads the Pool as stored in etcd, not from the watch cache: an
// execution's admission must see a pool created or opened a moment ago
// (CI refused one with "there is no pool" right after the pool's create),
// and a pool whose lending was just closed. Executions are created far less
// often than the requests the authorizer reads projects and nodes for.
func (g storeGetters) GetPool(ctx context.Context, name string) (*nodusv1.Pool, error) {
	obj, err := g.pools.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Pool), nil
}

// GetEnrollmentToken reads from the watch cache or, when fresh, from etcd.
// The authenticator reads it to authenticate; the enrollment reads it from
// etcd again, where a token is used once.
func (g storeGetters) GetEnrollmentToken(ctx context.Context, name string, fresh bool) (*nodusv1.EnrollmentToken, error) {
	obj, err := g.enrollments.Get(ctx, name, readOptions(fresh))
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.EnrollmentToken), nil
}

// GetNode reads from the watch cache (a re-enrollment reaches it within
// milliseconds) or, when fresh, from etcd.
func (g storeGetters) GetNode(ctx context.Context, name string, fresh bool) (*nodusv1.Node, error) {
	obj, err := g.nodes.Get(ctx, name, readOptions(fresh))
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Node), nil
}

// fromCache asks the watch cache: fresh to within milliseconds, no etcd round trip.
var fromCache = &metav1.GetOptions{ResourceVersion: "0"}

// readOptions reads from the watch cache, or from etcd when fresh.
func readOptions(fresh bool) *metav1.GetOptions {
	if fresh {
		return &metav1.GetOptions{}
	}
	return fromCache
}

// GetProject reads from the watch cache or, when fresh, from etcd.
func (g storeGetters) GetProject(ctx context.Context, name string, fresh bool) (*nodusv1.Project, error) {
	obj, err := g.projects.Get(ctx, name, readOptions(fresh))
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Project), nil
}

func (g storeGetters) GetAccessToken(ctx context.Context, name string, fresh bool) (*nodusv1.AccessToken, error) {
	obj, err := g.tokens.Get(ctx, name, readOptions(fresh))
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.AccessToken), nil
}
