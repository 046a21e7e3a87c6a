package integration

import (
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	applyv1 "github.com/nodus-dev/nodus/pkg/generated/applyconfiguration/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestClientsetCRUD drives every kind through the generated typed clientset
// against the real server: create, get, list, watch, update, status update,
// patch and delete.
func TestClientsetCRUD(t *testing.T) {
	s := testserver.StartTestServer(t)
	c := s.Client.NodusV1()
	ctx := ctx(t)

	t.Run("Project", func(t *testing.T) {
		w, err := c.Projects().Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		p, err := c.Projects().Create(ctx, project("acme", nodusv1.ProjectMember{Name: "alice", Role: nodusv1.ProjectRoleAdmin}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.Members[0].Kind != nodusv1.MemberKindUser {
			t.Errorf("member kind not defaulted to User: %q", p.Spec.Members[0].Kind)
		}
		expectEvent(t, w, watch.Added, "acme")
		p.Spec.DisplayName = "ACME Corp"
		if p, err = c.Projects().Update(ctx, p, metav1.UpdateOptions{}); err != nil || p.Spec.DisplayName != "ACME Corp" {
			t.Fatalf("update: %v %+v", err, p)
		}
		expectEvent(t, w, watch.Modified, "acme")
		list, err := c.Projects().List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("list: %v %d", err, len(list.Items))
		}
	})

	t.Run("Pool", func(t *testing.T) {
		if _, err := c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "fra1"}, Spec: nodusv1.PoolSpec{Supplier: "hx"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p, err := c.Pools().Patch(ctx, "fra1", types.MergePatchType, []byte(`{"spec":{"location":"Frankfurt"}}`), metav1.PatchOptions{})
		if err != nil || p.Spec.Location != "Frankfurt" || p.Spec.Supplier != "hx" {
			t.Fatalf("patch: %v %+v", err, p)
		}
	})

	t.Run("Node", func(t *testing.T) {
		n, err := c.Nodes().Create(ctx, &nodusv1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-001"},
			Spec:       nodusv1.NodeSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", Traits: []string{"CUSTOM_NVLINK"}},
			Status:     nodusv1.NodeStatus{AgentGeneration: 7},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Status.AgentGeneration != 0 || n.Status.ProvisionState != nodusv1.ProvisionStateEnroll {
			t.Errorf("create must reset status to enroll, got %+v", n.Status)
		}
		n.Status.Inventory = nodusv1.NodeInventory{CPU: 64, MemoryMiB: 1 << 20, DiskGiB: 100}
		n.Spec.Maintenance = true
		n, err = c.Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Status.Inventory.CPU != 64 || n.Spec.Maintenance {
			t.Errorf("status update must change status only: %+v / %+v", n.Status, n.Spec)
		}
		// Available, as the server makes an enrolled node (no client's status
		// write may: TestAnOperatorsStatusWriteMovesNoClaim).
		forgeNodeInEtcd(t, s, "gpu-001", func(n *nodusv1.Node) { n.Status.ProvisionState = nodusv1.ProvisionStateAvailable })
		if n, err = c.Nodes().Get(ctx, "gpu-001", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		n.Status.Inventory.CPU = 1
		n.Spec.Maintenance, n.Spec.MaintenanceReason = true, "disk swap"
		n, err = c.Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Status.Inventory.CPU != 64 || !n.Spec.Maintenance {
			t.Errorf("main update must change spec only: %+v / %+v", n.Status, n.Spec)
		}
		sel, err := c.Nodes().List(ctx, metav1.ListOptions{FieldSelector: "spec.pool=fra1,status.provisionState=available"})
		if err != nil || len(sel.Items) != 1 {
			t.Fatalf("field selector: %v %d", err, len(sel.Items))
		}
		if _, err := c.Nodes().List(ctx, metav1.ListOptions{FieldSelector: "spec.bogus=x"}); !apierrors.IsBadRequest(err) {
			t.Errorf("unknown field selector: want 400, got %v", err)
		}
	})

	t.Run("Allocation", func(t *testing.T) {
		a, err := c.Allocations().Create(ctx, &nodusv1.Allocation{
			ObjectMeta: metav1.ObjectMeta{Name: "alloc-1"},
			Spec:       nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8", Traits: []string{"CUSTOM_NVLINK"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a.Status.State != nodusv1.AllocationStateAllocating {
			t.Errorf("new allocation state %q, want allocating", a.Status.State)
		}
		// The allocation controller writes the status meanwhile: each try
		// starts from the latest version, so only the change can be refused.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			latest, err := c.Allocations().Get(ctx, a.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			latest.Spec.ResourceClass = "other"
			_, err = c.Allocations().Update(ctx, latest, metav1.UpdateOptions{})
			return err
		})
		if !apierrors.IsInvalid(err) {
			t.Errorf("changing the request must be invalid, got %v", err)
		}
	})

	t.Run("Reservation", func(t *testing.T) {
		if _, err := c.Reservations().Create(ctx, &nodusv1.Reservation{
			ObjectMeta: metav1.ObjectMeta{Name: "r1"},
			Spec: nodusv1.ReservationSpec{Project: "acme", Placement: nodusv1.ReservationPlacement{Node: "gpu-001"},
				StartsAt: termStart, EndsAt: termEnd, LoginUser: "ubuntu"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The reservation controller writes the status too: each write
		// starts from the latest version, so only validation can refuse it.
		update := func(change func(*nodusv1.Reservation)) error {
			return retry.OnError(retry.DefaultRetry, apierrors.IsConflict, func() error {
				r, err := c.Reservations().Get(ctx, "r1", metav1.GetOptions{})
				if err != nil {
					return err
				}
				change(r)
				_, err = c.Reservations().UpdateStatus(ctx, r, metav1.UpdateOptions{})
				return err
			})
		}
		if err := update(func(r *nodusv1.Reservation) {
			r.Status.Epoch, r.Status.State = r.Status.Epoch+3, nodusv1.ReservationStateActive
		}); err != nil {
			t.Fatal(err)
		}
		if err := update(func(r *nodusv1.Reservation) { r.Status.Epoch-- }); !apierrors.IsInvalid(err) {
			t.Errorf("an epoch must never decrease, got %v", err)
		}
	})

	t.Run("ReservedHost", func(t *testing.T) {
		h, err := c.ReservedHosts("acme").Create(ctx, reservedHost("acme", "manual"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h.Status.Reservation.Epoch != 1 || h.Status.Inventory.GPUs[0].Type != "h100-sxm-80g" {
			t.Errorf("create must keep the projection: %+v", h.Status)
		}
		h.Status.Reservation.Epoch = 2
		h.Status.LastHeartbeatTime = &metav1.Time{Time: time.Now().Truncate(time.Second)}
		if h, err = c.ReservedHosts("acme").UpdateStatus(ctx, h, metav1.UpdateOptions{}); err != nil || h.Status.Reservation.Epoch != 2 {
			t.Fatalf("status update: %v", err)
		}
		list, err := c.ReservedHosts("").List(ctx, metav1.ListOptions{FieldSelector: "status.reservation.state=active,metadata.name=manual"})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("list across projects: %v %d", err, len(list.Items))
		}
		if err := c.ReservedHosts("acme").Delete(ctx, "manual", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ReservedHosts("acme").Get(ctx, "manual", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("after delete: want 404, got %v", err)
		}
	})

	t.Run("AccessToken", func(t *testing.T) {
		tok, err := c.AccessTokens().Create(ctx, &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{Name: "alice-laptop"},
			Spec: nodusv1.AccessTokenSpec{User: "alice"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tok.Status.Token == "" || tok.Status.TokenHash == "" {
			t.Fatalf("create must return the token once and its hash: %+v", tok.Status)
		}
		stored, err := c.AccessTokens().Get(ctx, "alice-laptop", metav1.GetOptions{})
		if err != nil || stored.Status.Token != "" || stored.Status.TokenHash != tok.Status.TokenHash {
			t.Fatalf("stored token must hold only the hash: %v %+v", err, stored.Status)
		}
	})

	// Server-side apply through the typed client, and the apply
	// configurations' extract, change, apply: two managers keep one
	// borrower each in the pool's keyed list, and each extracts its own.
	t.Run("Apply", func(t *testing.T) {
		borrower := func(project string) *applyv1.PoolBorrowerApplyConfiguration {
			return applyv1.PoolBorrower().WithProject(project).WithMaxGPUs(8)
		}
		apply := func(manager string, pool *applyv1.PoolApplyConfiguration) *nodusv1.Pool {
			t.Helper()
			got, err := c.Pools().Apply(ctx, pool, metav1.ApplyOptions{FieldManager: manager})
			if err != nil {
				t.Fatalf("%s's apply: %v", manager, err)
			}
			return got
		}
		borrowers := func(p *nodusv1.Pool) []string {
			var names []string
			if p.Spec.Lending != nil {
				for _, b := range p.Spec.Lending.Borrowers {
					names = append(names, b.Project)
				}
			}
			return names
		}
		extracted := func(p *nodusv1.Pool, manager string) *applyv1.PoolApplyConfiguration {
			t.Helper()
			pool, err := applyv1.ExtractPool(p, manager)
			if err != nil {
				t.Fatalf("%s's extract: %v", manager, err)
			}
			return pool
		}
		extractedBorrowers := func(pool *applyv1.PoolApplyConfiguration) []string {
			var names []string
			if pool.Spec != nil && pool.Spec.Lending != nil {
				for _, b := range pool.Spec.Lending.Borrowers {
					names = append(names, *b.Project)
				}
			}
			return names
		}
		apply("ops", applyv1.Pool("shared").WithSpec(applyv1.PoolSpec().WithSupplier("hx").
			WithLending(applyv1.PoolLending().WithOpen(true).WithBorrowers(borrower("alpha")))))
		p := apply("team", applyv1.Pool("shared").WithSpec(applyv1.PoolSpec().
			WithLending(applyv1.PoolLending().WithBorrowers(borrower("beta")))))
		if got := borrowers(p); !slices.Equal(got, []string{"alpha", "beta"}) {
			t.Fatalf("after both applies the borrowers are %v, want alpha and beta", got)
		}
		ops := extracted(p, "ops")
		if got := extractedBorrowers(ops); !slices.Equal(got, []string{"alpha"}) || ops.Spec.Supplier == nil || *ops.Spec.Supplier != "hx" {
			t.Fatalf("ops extracted the borrowers %v and supplier %v, want its own: alpha, hx", got, ops.Spec.Supplier)
		}
		// ops drops alpha and adds gamma: team's beta stays.
		ops.Spec.Lending.Borrowers = []applyv1.PoolBorrowerApplyConfiguration{*borrower("gamma")}
		p = apply("ops", ops)
		if got := borrowers(p); !slices.Equal(got, []string{"beta", "gamma"}) {
			t.Errorf("after ops' second apply the borrowers are %v, want beta and gamma", got)
		}
		if got := extractedBorrowers(extracted(p, "team")); !slices.Equal(got, []string{"beta"}) {
			t.Errorf("team extracted the borrowers %v, want beta", got)
		}
		if err := c.Pools().Delete(ctx, "shared", metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		// The reservation first: a project with a live reservation is not deleted.
		deletes := []struct {
			kind string
			del  func() error
		}{
			{"reservation", func() error { return c.Reservations().Delete(ctx, "r1", metav1.DeleteOptions{}) }},
			{"allocation", func() error { return c.Allocations().Delete(ctx, "alloc-1", metav1.DeleteOptions{}) }},
			{"node", func() error { return c.Nodes().Delete(ctx, "gpu-001", metav1.DeleteOptions{}) }},
			{"pool", func() error { return c.Pools().Delete(ctx, "fra1", metav1.DeleteOptions{}) }},
			{"accesstoken", func() error { return c.AccessTokens().Delete(ctx, "alice-laptop", metav1.DeleteOptions{}) }},
			{"project", func() error { return c.Projects().Delete(ctx, "acme", metav1.DeleteOptions{}) }},
		}
		for _, d := range deletes {
			if err := d.del(); err != nil {
				t.Errorf("delete %s: %v", d.kind, err)
			}
		}
	})
}

func expectEvent(t *testing.T, w watch.Interface, want watch.EventType, name string) {
	t.Helper()
	select {
	case e := <-w.ResultChan():
		m, ok := e.Object.(metav1.Object)
		if e.Type != want || !ok || m.GetName() != name {
			t.Fatalf("watch: got %s %v, want %s %s", e.Type, e.Object, want, name)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("watch: no %s event for %s", want, name)
	}
}
