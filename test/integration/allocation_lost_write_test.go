package integration

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	allocationregistry "github.com/nodus-dev/nodus/pkg/registry/allocation"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAllocationCreateAfterALostWrite plants the state a create of an
// allocation leaves when its write fails without an answer (etcd lost its
// leader, the request timed out, the replica died): the claims of its
// Ironic name and UUID, naming the object, and no object. The client's
// retry must create the allocation, not be told that it exists; and the
// Ironic name stays unique whichever of the two creates' claims is left.
func TestAllocationCreateAfterALostWrite(t *testing.T) {
	s := testserver.StartTestServer(t)
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	allocations := s.Client.NodusV1().Allocations()
	lostCreate := func(object, uid string, at time.Time) {
		t.Helper()
		value, _ := json.Marshal(map[string]any{"uid": uid, "object": object, "at": at.Unix()})
		for _, key := range []string{allocationregistry.NameClaims + object, allocationregistry.UUIDClaims + uid} {
			if _, err := etcd.Put(ctx(t), key, string(value)); err != nil {
				t.Fatal(err)
			}
		}
	}
	create := func(name, ironicName string) (*nodusv1.Allocation, error) {
		return allocations.Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: nodusv1.AllocationSpec{ResourceClass: "none-such", IronicName: ironicName}}, metav1.CreateOptions{})
	}

	t.Run("the retry of a create whose write was lost creates it", func(t *testing.T) {
		lostCreate("alloc-lost", "00000000-0000-4000-8000-00000000a001", time.Now())
		created, err := create("alloc-lost", "")
		if err != nil {
			t.Fatalf("the retry: %v", err)
		}
		got, err := allocations.Get(ctx(t), "alloc-lost", metav1.GetOptions{})
		if err != nil || got.UID != created.UID || got.Spec.IronicName != "alloc-lost" {
			t.Fatalf("the allocation after the retry: %v %+v", err, got)
		}
		// Now it exists, and says so.
		if _, err := create("alloc-lost", ""); !apierrors.IsAlreadyExists(err) {
			t.Errorf("a second create of an allocation that exists: %v", err)
		}
		// Its name is its own: the retry took the lost create's claim over.
		if _, err := create("another", "alloc-lost"); reasonOfErr(err) != apierror.ReasonAllocationNameTaken {
			t.Errorf("another allocation of the name alloc-lost: %v", err)
		}
		if _, err := allocations.Get(ctx(t), "another", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the refused allocation was written: %v", err)
		}
	})

	t.Run("through Ironic, the retry keeps the name as object name", func(t *testing.T) {
		lostCreate("ironic-lost", "00000000-0000-4000-8000-00000000a002", time.Now())
		op := tokenFor(t, s, "ops", "nodus:operators")
		r := do(t, op, "POST", "/v1/allocations", "application/json",
			strings.NewReader(`{"resource_class":"none-such","name":"ironic-lost"}`), "X-OpenStack-Ironic-API-Version", "1.60")
		created := decodeAllocation(t, r, http.StatusCreated)
		got, err := allocations.Get(ctx(t), "ironic-lost", metav1.GetOptions{})
		if err != nil || string(got.UID) != created.UUID {
			t.Errorf("the Ironic retry's object: %v %+v, answered %+v", err, got, created)
		}
	})

	t.Run("a name whose claim names another create of its object stays taken", func(t *testing.T) {
		// The lost create's write landed after all, and the create that
		// took its claims over failed and stopped before it gave them up:
		// the claim names the object, under the UID of the create that
		// failed, long ago.
		landed, err := create("landed", "")
		if err != nil {
			t.Fatal(err)
		}
		lostCreate("landed", "00000000-0000-4000-8000-00000000a003", time.Now().Add(-time.Hour))
		if _, err := create("thief", "landed"); reasonOfErr(err) != apierror.ReasonAllocationNameTaken {
			t.Errorf("another allocation of the name landed: %v", err)
		}
		if _, err := create("landed", ""); !apierrors.IsAlreadyExists(err) {
			t.Errorf("a create of the object landed: %v", err)
		}
		if got, err := allocations.Get(ctx(t), "landed", metav1.GetOptions{}); err != nil || got.UID != landed.UID {
			t.Errorf("the allocation landed: %v %+v", err, got)
		}
	})
}

// reasonOfErr is the registered reason of an API error, "" for another.
func reasonOfErr(err error) metav1.StatusReason {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return ""
	}
	return status.Status().Reason
}
