package integration

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/controller/scheduler"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAStaleClaimsPlacementCannotLandAfterItsRelease: a scheduler claimed
// a host's GPUs for an execution and paused before writing the placement
// (or its clock is behind the new leader's, which judges the claim's age).
// The leader takes the claim, pending past a minute, for abandoned,
// releases it, and places another execution on those GPUs. The paused one
// resumes: its placement write, conditional on the execution as it read
// it, landed, and two executions held the same GPUs.
func TestAStaleClaimsPlacementCannotLandAfterItsRelease(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 16}, false)
	node := "gpu-00"
	alias := f.aliases[node]
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })

	// Nothing is lent yet: both wait, with the same message, the older
	// first in line.
	first := f.submit(t, "beta", 8, 60)
	time.Sleep(1100 * time.Millisecond) // creation times are kept to the second
	claimed := f.submit(t, "beta", 8, 60)
	var waited string
	for _, e := range []*nodusv1.Execution{first, claimed} {
		waited = f.waitExecution(t, "beta", e.Name, func(e *nodusv1.Execution) bool { return e.Status.Reason == "Waiting" }).Status.Message
	}
	// The paused scheduler's view of the second, and its claim, made as
	// long ago as a clock two minutes behind says.
	read, err := s.Client.NodusV1().Executions("beta").Get(ctx(t), claimed.Name, metav1.GetOptions{})
	if err != nil || read.Status.Message != waited {
		t.Fatalf("the second execution: %v %+v", err, read.Status)
	}
	made := time.Now().Add(-2 * time.Minute).Unix()
	for gpu := 0; gpu < 8; gpu++ {
		value := fmt.Sprintf("beta/%s/%s@%d#0badc0de", read.Name, read.UID, made)
		if _, err := etcd.Put(ctx(t), scheduler.ClaimsPrefix+alias+"/"+strconv.Itoa(gpu), value); err != nil {
			t.Fatal(err)
		}
	}

	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d,"maxGPUs":8}`, f.reservation(t, node).Status.Epoch)); r.code != http.StatusOK {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	placed := f.waitExecution(t, "beta", first.Name, func(e *nodusv1.Execution) bool { return e.Status.Phase == nodusv1.ExecutionScheduled })
	if placed.Status.Host != alias || len(placed.Status.GPUIndices) != 8 {
		t.Fatalf("the first execution: %+v", placed.Status)
	}
	// The claim is released only once the paused placement cannot land.
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		resp, err := etcd.Get(c, scheduler.ClaimsPrefix+alias+"/0")
		return err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) != fmt.Sprintf("beta/%s/%s@%d#0badc0de", read.Name, read.UID, made), err
	}); err != nil {
		t.Fatalf("the stale claim was never released: %v", err)
	}

	resumed := read.DeepCopy()
	resumed.Status = placed.Status
	resumed.Status.Reason, resumed.Status.Message = "Scheduled", "placed on "+alias
	_, err = s.Client.NodusV1().Executions("beta").UpdateStatus(ctx(t), resumed, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("the paused scheduler's placement, on GPUs given to another since: %v, want a conflict", err)
	}
}
