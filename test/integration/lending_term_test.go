package integration

import (
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAHostWhoseTermIsOverTakesNoBorrower: the reservation controller ends
// a reservation at endsAt; until it has (behind on its work, or between
// two leaders), the reservation still read active and lent, and the
// scheduler placed borrowers' executions on its host and the host's agent
// could start them, all to be drained a moment later, after the owner's
// term. A host whose term is over takes no placement and no start, and an
// execution placed on it before is drained.
func TestAHostWhoseTermIsOverTakesNoBorrower(t *testing.T) {
	s := testserver.StartTestServer(t)
	f, etcd := oneLentHost(t, s, 8)
	takeTheLead(t, etcd) // no reservation controller ends the term: only the scheduler below runs
	stop := runScheduler(t, s.ServerConfig, etcd)
	placedBefore := f.submit(t, "beta", 1, 3600)
	f.waitExecution(t, "beta", placedBefore.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	stop()

	// The term ends; the reservation still reads active and lent.
	forgeInEtcd(t, s, "/registry/nodus.dev/reservations/gpu-00", func(r *nodusv1.Reservation) {
		r.Spec.EndsAt = metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	})
	if r := f.reservation(t, "gpu-00"); r.Status.State != nodusv1.ReservationStateActive || r.Status.Lending == nil || !r.Status.Lending.Lent {
		t.Fatalf("the reservation should still read active and lent: %+v", r.Status)
	}
	started := f.report(t, "gpu-00", "beta", placedBefore.Name, nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning})
	expectReason(t, started, http.StatusConflict, apierror.ReasonHostNotLent)

	runScheduler(t, s.ServerConfig, etcd)
	placedAfter := f.submit(t, "beta", 1, 3600)
	drained := f.waitExecution(t, "beta", placedBefore.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase != nodusv1.ExecutionScheduled })
	if drained.Status.Phase != nodusv1.ExecutionDrained {
		t.Errorf("an execution placed before the term ended, not started: %+v", drained.Status)
	}
	time.Sleep(2 * time.Second) // passes of the scheduler
	if e := f.waitExecution(t, "beta", placedAfter.Name, func(*nodusv1.Execution) bool { return true }); e.Status.Phase != nodusv1.ExecutionPending {
		t.Errorf("an execution submitted after the term ended was placed on its host: %+v", e.Status)
	}
}
