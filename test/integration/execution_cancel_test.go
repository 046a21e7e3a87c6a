package integration

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestACancelNamingAnExecutionsUIDCancelsOnlyIt: a cancel was by name
// alone, so one meant for an execution deleted since (the project
// controller's, emptying a project, resumed after a pause) cancelled the
// execution made under its name after it. A cancel that names a UID
// cancels only that object.
func TestACancelNamingAnExecutionsUIDCancelsOnlyIt(t *testing.T) {
	f := newLendingFleet(t, testserver.StartTestServer(t), 1, map[string]int32{"beta": 8}, false)
	e := f.submit(t, "beta", 1, 60)
	executions := versioned.NewForConfigOrDie(f.borrowers["beta"]).NodusV1().Executions("beta")
	_, err := executions.Cancel(ctx(t), e.Name, &nodusv1.ExecutionCancelRequest{UID: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a cancel naming another object's UID: %v, want 404", err)
	}
	if got, err := executions.Get(ctx(t), e.Name, metav1.GetOptions{}); err != nil || got.Status.Phase.Finished() {
		t.Fatalf("the execution after a cancel of another object: %v %+v", err, got.Status)
	}
	cancelled, err := executions.Cancel(ctx(t), e.Name, &nodusv1.ExecutionCancelRequest{UID: e.UID}, metav1.CreateOptions{})
	if err != nil || cancelled.Status.Phase != nodusv1.ExecutionCancelled {
		t.Errorf("a cancel naming its UID: %v %+v", err, cancelled)
	}
}
