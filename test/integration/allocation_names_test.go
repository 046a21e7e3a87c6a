package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAnAllocationOfABadNameTakesNoIronicName: a create whose object name
// the store refuses (422) claimed its Ironic name first, and could not
// release it (the release reads the object, a read the store refuses): the
// name answered 409 AllocationNameTaken for a minute, then 400 about the
// refused object name, to every create or rename that asked for it.
func TestAnAllocationOfABadNameTakesNoIronicName(t *testing.T) {
	s := testserver.StartTestServer(t)
	for _, body := range []string{
		`{"apiVersion":"nodus.dev/v1","kind":"Allocation","metadata":{"name":"bad%name"},"spec":{"ironicName":"gpu-7","resourceClass":"gpu"}}`,
		`{"apiVersion":"nodus.dev/v1","kind":"Allocation","metadata":{"generateName":"Bad_"},"spec":{"ironicName":"gpu-7","resourceClass":"gpu"}}`,
	} {
		if r := do(t, s.Config, "POST", "/apis/nodus.dev/v1/allocations", "application/json", strings.NewReader(body)); r.code != http.StatusUnprocessableEntity {
			t.Errorf("an allocation of a name the store refuses: %d %s", r.code, r.body)
		}
	}
	_, err := s.Client.NodusV1().Allocations().Create(ctx(t), &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "good"},
		Spec: nodusv1.AllocationSpec{IronicName: "gpu-7", ResourceClass: "gpu"}}, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("an allocation asking for the Ironic name the refused ones asked for: %v", err)
	}
}

// TestADryRunOfAnAllocationAnswersAsItsCreate: a server-side dry run
// (kubectl apply --dry-run=server) of an allocation asking for an Ironic
// name another allocation holds answered 201, where the create answers 409.
func TestADryRunOfAnAllocationAnswersAsItsCreate(t *testing.T) {
	s := testserver.StartTestServer(t)
	allocations := s.Client.NodusV1().Allocations()
	allocation := func(name, ironicName string) *nodusv1.Allocation {
		return &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nodusv1.AllocationSpec{IronicName: ironicName, ResourceClass: "gpu"}}
	}
	if _, err := allocations.Create(ctx(t), allocation("first", "gpu-7"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := allocations.Create(ctx(t), allocation("second", "gpu-7"), dryRun); apierrors.ReasonForError(err) != metav1.StatusReason(apierror.ReasonAllocationNameTaken) {
		t.Errorf("a dry run asking for a name another allocation holds: %v, want AllocationNameTaken", err)
	}
	if _, err := allocations.Create(ctx(t), allocation("second", "gpu-8"), dryRun); err != nil {
		t.Errorf("a dry run asking for a free name: %v", err)
	}
	if _, err := allocations.Get(ctx(t), "second", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a dry run wrote the allocation: %v", err)
	}
	if _, err := allocations.Create(ctx(t), allocation("third", "gpu-8"), metav1.CreateOptions{}); err != nil {
		t.Errorf("the name a dry run asked for was left claimed: %v", err)
	}
	// kubectl apply --server-side --dry-run=server, and kubectl diff: the
	// same answer as the apply itself (they answered 201 and 200).
	apply := func(name, ironicName string) response {
		return do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/allocations/"+name+"?fieldManager=ops&force=true&dryRun=All", "application/apply-patch+yaml",
			strings.NewReader(fmt.Sprintf("apiVersion: nodus.dev/v1\nkind: Allocation\nmetadata: {name: %s}\nspec: {ironicName: %s, resourceClass: gpu}\n", name, ironicName)))
	}
	expectReason(t, apply("fourth", "gpu-7"), http.StatusConflict, apierror.ReasonAllocationNameTaken)
	expectReason(t, apply("third", "gpu-7"), http.StatusConflict, apierror.ReasonAllocationNameTaken)
	rename := do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/allocations/third?dryRun=All", "application/merge-patch+json",
		strings.NewReader(`{"spec":{"ironicName":"gpu-7"}}`))
	expectReason(t, rename, http.StatusConflict, apierror.ReasonAllocationNameTaken)
	if r := apply("third", "gpu-9"); r.code != http.StatusOK {
		t.Errorf("a dry-run rename to a free name: %d %s", r.code, r.body)
	}
	if r := apply("fourth", "gpu-9"); r.code != http.StatusCreated {
		t.Errorf("a dry-run apply of a new allocation with a free name: %d %s", r.code, r.body)
	}
	// Nothing was written, taken or released by the dry runs.
	if a, err := allocations.Get(ctx(t), "third", metav1.GetOptions{}); err != nil || a.Spec.IronicName != "gpu-8" {
		t.Errorf("after dry runs, third: %v %+v", err, a)
	}
	if _, err := allocations.Get(ctx(t), "fourth", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a dry-run apply wrote the allocation: %v", err)
	}
	if _, err := allocations.Create(ctx(t), allocation("fifth", "gpu-8"), metav1.CreateOptions{}); apierrors.ReasonForError(err) != metav1.StatusReason(apierror.ReasonAllocationNameTaken) {
		t.Errorf("third's name, after dry-run renames of third: %v, want AllocationNameTaken", err)
	}
	if _, err := allocations.Create(ctx(t), allocation("fifth", "gpu-9"), metav1.CreateOptions{}); err != nil {
		t.Errorf("the name dry runs asked for was left claimed: %v", err)
	}
}
