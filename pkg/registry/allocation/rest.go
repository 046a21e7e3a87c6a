package allocation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/outcome"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// REST deletes allocations the way Ironic does: not while their node is
// active and out of maintenance, and freeing the node when they go. Its
// creates, updates and deletes keep each allocation's Ironic name and UUID
// unique with claims in etcd (claims.go).
type REST struct {
	*base.REST
	Nodes  *genericregistry.Store // nodes/status
	claims *claims
}

// Storage returns the Allocation storages; kv is the etcd the claims live
// in, the one the stores write to.
func Storage(allocations, nodes base.Stores, kv clientv3.KV) map[string]rest.Storage {
	r := &REST{REST: &base.REST{Store: allocations.Main, Short: []string{"alloc"}}, Nodes: nodes.Status}
	r.claims = &claims{kv: kv, now: time.Now, holds: r.holds}
	return map[string]rest.Storage{
		"allocations":        r,
		"allocations/status": base.NewStatusREST(allocations.Status),
	}
}

type uidKey struct{}

// WithUID makes the allocation created with ctx have uid, a canonical
// UUID: the one an Ironic client asked for. Without it an allocation gets
// a random one, as any object does.
func WithUID(ctx context.Context, uid string) context.Context {
	return context.WithValue(ctx, uidKey{}, uid)
}

func uidFrom(ctx context.Context) (string, bool) {
	uid, ok := ctx.Value(uidKey{}).(string)
	return uid, ok && uid != ""
}

// maxGeneratedNames bounds the tries for a free generated object name, as
// the generic store's own retry does.
const maxGeneratedNames = 8

// Create claims the allocation's UUID and Ironic name, then writes it. A
// create that names the object and gives no Ironic name takes the object
// name as its Ironic name.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	a := obj.(*nodusv1.Allocation)
	if a.Spec.IronicName == "" && a.GenerateName == "" {
		a.Spec.IronicName = a.Name
	}
	uid, ok := uidFrom(ctx)
	if !ok {
		uid = string(uuid.NewUUID())
		ctx = WithUID(ctx, uid) // PrepareForCreate sets it
	}
	if (a.Spec.IronicName != "" && !validation.IsIronicName(a.Spec.IronicName)) || !objectNamed(a) {
		// Validation refuses a name: no claims. (A claim for an object name
		// the store refuses could never be released: releasing reads the
		// object, and the read is refused.)
		return r.Store.Create(ctx, a, createValidation, options)
	}
	keys := []string{uuidClaim(uid)}
	if a.Spec.IronicName != "" {
		keys = append(keys, nameClaim(a.Spec.IronicName))
	}
	if len(options.DryRun) > 0 {
		// Nothing is written, and the answer is the write's: a name or UUID
		// another allocation holds is refused here too.
		if err := r.claims.check(ctx, keys, owner{UID: uid, Object: a.Name}); err != nil {
			return nil, r.claimError(ctx, a, err, true)
		}
		return r.Store.Create(ctx, a, createValidation, options)
	}
	// The claims name the object, so a generated name is chosen here.
	generated := a.Name == "" && a.GenerateName != ""
	for attempt := 1; ; attempt++ {
		try := a.DeepCopy()
		if generated {
			try.Name = names.SimpleNameGenerator.GenerateName(a.GenerateName)
		}
		o := owner{UID: uid, Object: try.Name}
		if err := r.takeClaims(ctx, keys, o); err != nil {
			return nil, r.claimError(ctx, try, err, true)
		}
		out, err := r.Store.Create(ctx, try, createValidation, options)
		if err == nil {
			return out, nil
		}
		if outcome.Refused(err) {
			r.release(ctx, keys, o, true)
		}
		if !generated || !apierrors.IsAlreadyExists(err) || attempt == maxGeneratedNames {
			return nil, err
		}
	}
}

// objectNamed says whether a's object name, or the prefix of a generated
// one, is one the store accepts.
func objectNamed(a *nodusv1.Allocation) bool {
	if a.Name != "" {
		return validation.IsClusterObjectName(a.Name, false)
	}
	return a.GenerateName != "" && validation.IsClusterObjectName(a.GenerateName, true)
}

// takeClaims claims keys for o, an allocation being created. A live
// claim of another create of the same object name is that create's, whose
// write failed without an answer (a timeout, an etcd leader lost, a
// replica gone) and may have landed, or may still: the object decides.
// If it exists, this is the create of an object that exists; if not, the
// claims are taken over, and the object's create in etcd lets only one
// of the two creates write it.
func (r *REST) takeClaims(ctx context.Context, keys []string, o owner) error {
	err := r.claims.take(ctx, keys, o)
	var taken *takenError
	if !errors.As(err, &taken) || taken.holder.Object != o.Object {
		return err
	}
	// An empty resourceVersion reads etcd, not the watch cache.
	_, getErr := r.Store.Get(ctx, o.Object, &metav1.GetOptions{})
	switch {
	case getErr == nil:
		return err
	case !apierrors.IsNotFound(getErr):
		return getErr
	}
	return r.claims.takeOver(ctx, keys, o)
}

// Update claims the Ironic name an update gives the allocation before the
// update is written, and then releases the name it left.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	objInfo = base.PatchRefusals(ctx, objInfo)
	if forceAllowCreate {
		// A server-side apply of an allocation that does not exist creates
		// it: through Create, which claims its UUID and Ironic name, as a
		// POST would (a dry run checks them, as a POST's does).
		out, made, err := base.CreateByApply(ctx, r.Store, name, objInfo, func(obj runtime.Object) (runtime.Object, error) {
			return r.Create(ctx, obj, createValidation, base.CreateOptionsOf(options))
		})
		if made {
			return out, err == nil, err
		}
	}
	u := &renaming{UpdatedObjectInfo: objInfo, r: r, dryRun: len(options.DryRun) > 0}
	if u.dryRun {
		// Nothing is written, taken or released; a name another
		// allocation holds is refused, as in the update itself.
		return r.Store.Update(ctx, name, u, createValidation, updateValidation, forceAllowCreate, options)
	}
	out, created, err := r.Store.Update(ctx, name, u, createValidation, updateValidation, forceAllowCreate, options)
	var keys []string
	switch {
	case u.owner.UID == "":
	case err == nil:
		// Released only where the allocation, read again, does not hold
		// the name: the one it left, or one of an earlier try.
		keys = append(keys, u.left...)
		keys = append(keys, u.taken...)
	case outcome.Refused(err):
		keys = append(keys, u.taken...)
	}
	for i := range keys {
		keys[i] = nameClaim(keys[i])
	}
	r.release(ctx, keys, u.owner, false)
	return out, created, err
}

// renaming claims the new Ironic name inside the update, against the
// stored object it changes; the store may call it more than once.
type renaming struct {
	rest.UpdatedObjectInfo
	r           *REST
	dryRun      bool // check the new name's claim, take none
	owner       owner
	left, taken []string // names the allocation had, and those claimed for it
}

func (u *renaming) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	obj, err := u.UpdatedObjectInfo.UpdatedObject(ctx, oldObj)
	if err != nil {
		return obj, err
	}
	old, next := oldObj.(*nodusv1.Allocation), obj.(*nodusv1.Allocation)
	if old.UID == "" {
		return obj, nil
	}
	u.owner = owner{UID: string(old.UID), Object: old.Name}
	if old.Spec.IronicName != "" {
		u.left = append(u.left, old.Spec.IronicName)
	}
	to := next.Spec.IronicName
	if to == "" || to == old.Spec.IronicName || !validation.IsIronicName(to) {
		return obj, nil // nothing to claim; validation refuses a bad name
	}
	if u.dryRun {
		if err := u.r.claims.check(ctx, []string{nameClaim(to)}, u.owner); err != nil {
			return nil, u.r.claimError(ctx, next, err, false)
		}
		return obj, nil
	}
	if err := u.r.claims.take(ctx, []string{nameClaim(to)}, u.owner); err != nil {
		return nil, u.r.claimError(ctx, next, err, false)
	}
	u.taken = append(u.taken, to)
	return obj, nil
}

// DeleteCollection goes through Delete for each allocation: the store's
// own would take an active node's allocation and leave its claims and node
// held.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	return base.DeleteEach(ctx, r.Store, r, deleteValidation, options, listOptions)
}

// Delete refuses to take the allocation of an active node that is not in
// maintenance, then deletes it, releases its claims and frees its node.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	obj, err := r.Store.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	a := obj.(*nodusv1.Allocation)
	var node *nodusv1.Node
	if a.Status.Node != "" {
		n, err := r.Nodes.Get(ctx, a.Status.Node, &metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, false, err
		}
		// Only a node whose claim is this allocation's: one deleted and
		// enrolled again under the name since, or claimed by another, is
		// not its to keep or free.
		if n, ok := n.(*nodusv1.Node); err == nil && ok && n.Status.ClaimedByAllocation(a) {
			node = n
		}
	}
	if node != nil && node.Status.ProvisionState == nodusv1.ProvisionStateActive && !node.Spec.Maintenance {
		return nil, false, apierror.New(ctx, apierror.ReasonNodeActive, nodusv1.Resource("allocations"), name,
			fmt.Sprintf("allocation %s holds node %s, which is active and not in maintenance", name, node.Name), "")
	}
	// The allocation read and checked above, not another made under its
	// name since: that one's node is its own, and so is its own check.
	if options.Preconditions == nil || options.Preconditions.UID == nil {
		withUID := *options
		withUID.Preconditions = &metav1.Preconditions{UID: &a.UID}
		if options.Preconditions != nil {
			withUID.Preconditions.ResourceVersion = options.Preconditions.ResourceVersion
		}
		options = &withUID
	}
	out, deleted, err := r.Store.Delete(ctx, name, deleteValidation, options)
	if err != nil || len(options.DryRun) > 0 || !deleted {
		// Not deleted yet (a finalizer holds it): it holds its node and
		// its Ironic name and UUID until it goes. The allocation controller
		// then frees the node; the name and UUID claims, left behind, are
		// taken over by the next allocation that asks for them, their
		// holder gone (claims.live).
		return out, deleted, err
	}
	keys := []string{uuidClaim(string(a.UID))}
	if a.Spec.IronicName != "" {
		keys = append(keys, nameClaim(a.Spec.IronicName))
	}
	r.release(ctx, keys, owner{UID: string(a.UID), Object: a.Name}, true)
	if node == nil {
		return out, deleted, nil
	}
	_, _, err = r.Nodes.Update(ctx, node.Name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			n := old.(*nodusv1.Node).DeepCopy()
			if n.Status.ClaimedByAllocation(a) {
				n.Status.Allocation, n.Status.AllocationUID = "", ""
			}
			return n, nil
		}), nil, nil, false, &metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		// The allocation is gone: answering an error would have the caller
		// retry a delete that took effect. The allocation controller frees
		// a node whose allocation no longer exists.
		klog.FromContext(ctx).Error(err, "clearing a deleted allocation's node; the allocation controller frees it", "allocation", name, "node", node.Name)
	}
	return out, deleted, nil
}

// holds says, from etcd, whether the allocation o names holds the claim
// key: its UUID with o's UID, its Ironic name whatever its UID.
func (r *REST) holds(ctx context.Context, key string, o owner) (bool, error) {
	if o.Object == "" || !validation.IsClusterObjectName(o.Object, false) {
		// No such object can exist (a claim a create of a name the store
		// refuses left, before creates checked it).
		return false, nil
	}
	// An empty resourceVersion reads etcd, not the watch cache.
	obj, err := r.Store.Get(ctx, o.Object, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	a := obj.(*nodusv1.Allocation)
	if name, ok := strings.CutPrefix(key, NameClaims); ok {
		// Any UID: two creates of one object name may both have claimed
		// the name (takeClaims), and the one whose write landed has it.
		return a.Spec.IronicName == name, nil
	}
	return string(a.UID) == o.UID, nil
}

// release gives claims up after a write; a failure leaves them to go
// stale, which costs at most claimGrace of a name nobody holds.
func (r *REST) release(ctx context.Context, keys []string, o owner, hard bool) {
	if len(keys) == 0 || o.UID == "" {
		return
	}
	if err := r.claims.release(ctx, keys, o, hard); err != nil {
		klog.FromContext(ctx).Error(err, "releasing allocation claims", "allocation", o.Object, "keys", keys)
	}
}

// claimError is the API error of a claim that failed for a, being
// created or updated.
func (r *REST) claimError(ctx context.Context, a *nodusv1.Allocation, err error, creating bool) error {
	resource := nodusv1.Resource("allocations")
	var taken *takenError
	switch {
	case errors.As(err, &taken) && creating && taken.holder.Object == a.Name:
		// The allocation of that object name has it: the create of an
		// object that exists.
		return apierrors.NewAlreadyExists(resource, a.Name)
	case errors.As(err, &taken) && strings.HasPrefix(taken.key, UUIDClaims):
		uid := strings.TrimPrefix(taken.key, UUIDClaims)
		return apierror.New(ctx, apierror.ReasonAllocationUUIDTaken, resource, a.Name,
			fmt.Sprintf("An allocation with UUID %s already exists.", uid),
			fmt.Sprintf("Leave uuid out to get a new one, or send another; `openstack baremetal allocation show %s` shows the allocation that has it.", uid))
	case errors.As(err, &taken):
		name := strings.TrimPrefix(taken.key, NameClaims)
		return apierror.New(ctx, apierror.ReasonAllocationNameTaken, resource, a.Name,
			fmt.Sprintf("An allocation with name %s already exists.", name),
			fmt.Sprintf("Pick another name, or rename or delete the allocation that has it: `openstack baremetal allocation show %s` (or `kubectl get allocations -o custom-columns=NAME:.metadata.name,IRONIC:.spec.ironicName`).", name))
	case errors.Is(err, errClaimContended):
		return apierrors.NewConflict(resource, a.Name, err)
	case errors.As(err, new(apierrors.APIStatus)):
		return err // the store's own answer, reading the object
	}
	return apierrors.NewInternalError(err)
}
