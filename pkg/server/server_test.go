package server

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/registry/reservedhost"
)

func TestControllersInformersKeepOnlyTheReleaseEntries(t *testing.T) {
	entries := func() []metav1.ManagedFieldsEntry {
		return []metav1.ManagedFieldsEntry{
			{Manager: "nodus-reservation-controller", Operation: metav1.ManagedFieldsOperationUpdate},
			{Manager: "nodus-reservation-controller", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"},
			{Manager: "nodus-cli", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: reservedhost.ReleaseSubresource},
		}
	}
	host := &nodusv1.ReservedHost{ObjectMeta: metav1.ObjectMeta{Name: "h", ManagedFields: entries()}}
	out, err := withoutManagedFields(host)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*nodusv1.ReservedHost).ManagedFields; len(got) != 1 || got[0].Manager != "nodus-cli" || got[0].Subresource != reservedhost.ReleaseSubresource {
		t.Errorf("a host kept %+v, want only the release entry", got)
	}
	unreleased := &nodusv1.ReservedHost{ObjectMeta: metav1.ObjectMeta{Name: "u", ManagedFields: entries()[:2]}}
	if out, _ := withoutManagedFields(unreleased); out.(*nodusv1.ReservedHost).ManagedFields != nil {
		t.Errorf("a host never released kept %+v", out.(*nodusv1.ReservedHost).ManagedFields)
	}
	node := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: entries()}}
	if out, _ := withoutManagedFields(node); out.(*nodusv1.Node).ManagedFields != nil {
		t.Errorf("a node kept %+v", out.(*nodusv1.Node).ManagedFields)
	}
}

func TestAStoreThatChangesReadsIsRefused(t *testing.T) {
	plain := func() base.Stores {
		return base.Stores{Main: &genericregistry.Store{}, Status: &genericregistry.Store{}}
	}
	stores := &Stores{Projects: plain(), Pools: plain(), Nodes: plain(), Allocations: plain(), Reservations: plain(),
		ReservedHosts: plain(), AccessTokens: plain(), EnrollmentTokens: plain(), Executions: plain(), HostLendings: plain()}
	if err := noStoreChangesReads(stores); err != nil {
		t.Fatalf("stores that read objects as stored were refused: %v", err)
	}
	stores.Executions.Status.Decorator = func(runtime.Object) {}
	err := noStoreChangesReads(stores)
	if err == nil || !strings.Contains(err.Error(), "Executions") {
		t.Errorf("a status store with a Decorator: %v, want a refusal naming Executions", err)
	}
}
