package integration

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestADeleteLeavesNoFinalizerNothingRemoves deletes with kubectl's
// --cascade=orphan and --cascade=foreground. Nodus runs no garbage
// collector: the generic store would add the orphan or foregroundDeletion
// finalizer that only one removes, and the object would stay, deleting for
// ever: an execution a borrower deleted could still be placed and run, and
// its project's deletion would wait for it.
func TestADeleteLeavesNoFinalizerNothingRemoves(t *testing.T) {
	s := testserver.StartTestServer(t)
	c := s.Client.NodusV1()
	ctx := ctx(t)
	if _, err := c.Projects().Create(ctx, project("borrower", nodusv1.ProjectMember{Name: "bea", Role: nodusv1.ProjectRoleMember}),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "lending"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "borrower", MaxGPUs: 4}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	borrower, err := versioned.NewForConfig(tokenFor(t, s, "bea"))
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground} {
		created, err := borrower.NodusV1().Executions("borrower").Create(ctx, &nodusv1.Execution{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "job-"},
			Spec:       nodusv1.ExecutionSpec{Pool: "lending", Command: []string{"sleep", "1"}, GPUs: 1, MaxRuntimeSeconds: 60},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := borrower.NodusV1().Executions("borrower").Delete(ctx, created.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatalf("the borrower deletes its pending execution (%s): %v", policy, err)
		}
		if left, err := c.Executions("borrower").Get(ctx, created.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("an execution deleted with propagation %s is still there: %v, finalizers %v", policy, err, left.Finalizers)
		}
	}
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground} {
		name := "p-" + strings.ToLower(string(policy))
		if _, err := c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Pools().Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
		if left, err := c.Pools().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a pool deleted with propagation %s is still there: %v, finalizers %v", policy, err, left.Finalizers)
		}
	}
}
