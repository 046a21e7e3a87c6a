package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/executionlog"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/idempotency"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestDeletingAProject: refused while it has a live host; with retirement,
// access is retired, everything of the project goes, and a project created
// later under the same name sees nothing of the old one.
func TestDeletingAProject(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	f.host(t, "p-live", now.Add(-time.Hour), now.Add(time.Hour))
	f.host(t, "p-released", now.Add(-time.Hour), now.Add(time.Hour))
	if r := f.release(t, f.admin, "p-released", agreed, "", "Idempotency-Key", "release-once"); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	// acme borrows in a pool, and has an execution there (pending: nothing is lent).
	if _, err := c.Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "lends"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "acme", MaxGPUs: 8}, {Project: "other", MaxGPUs: 8}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e, err := c.Executions("acme").Create(ctx(t), &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{Name: "e1"},
		Spec: nodusv1.ExecutionSpec{Pool: "lends", Command: []string{"true"}, MaxRuntimeSeconds: 60}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	if err := executionlog.NewStore(etcd).Put(ctx(t), "acme", "e1", types.UID("uid-1"), executionlog.Log{Data: []byte("old output")}); err != nil {
		t.Fatal(err)
	}
	keysUnder := func(prefix string) int64 {
		resp, err := etcd.Get(ctx(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	if keysUnder(idempotency.Prefix+"acme/") == 0 || keysUnder(executionlog.Prefix+"acme/") == 0 {
		t.Fatal("the fixtures wrote no idempotency record or log under the project")
	}

	r := do(t, s.Config, "DELETE", "/apis/nodus.dev/v1/projects/acme", "", nil)
	// A released host that has not drained yet still counts: its access is being retired.
	if r.code != http.StatusConflict || envelopeOf(t, r).Reason != apierror.ReasonProjectHasReservations ||
		!strings.Contains(string(r.body), "p-live (active), p-released (releasing)") {
		t.Fatalf("deleting a project with a live host: %d %s", r.code, r.body)
	}
	if p, err := c.Projects().Get(ctx(t), "acme", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("a refused deletion must leave the project as it was: %v %+v", err, p)
	}

	// The operator asks for retirement, as `nodus projects delete --retire-reservations` does.
	if _, err := c.Projects().Patch(ctx(t), "acme", types.MergePatchType, []byte(`{"metadata":{"annotations":{"nodus.dev/retire-reservations":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Where the old project's objects are in etcd's history: a list's
	// revision, and a continue token of a paginated list.
	before, err := c.ReservedHosts("acme").List(ctx(t), metav1.ListOptions{Limit: 1})
	if err != nil || before.Continue == "" {
		t.Fatalf("a first page of the old project's hosts: %v %+v", err, before)
	}
	if err := c.Projects().Delete(ctx(t), "acme", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitProjectGone(t, s, "acme")
	for _, name := range []string{"p-live", "p-released"} {
		if _, err := c.Reservations().Get(ctx(t), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("reservation %s of the deleted project: %v", name, err)
		}
		waitNode(t, s, name, func(n *nodusv1.Node) bool {
			return n.Status.Reservation == "" && n.Status.ProvisionState == nodusv1.ProvisionStateCleaning
		})
	}
	if _, err := c.Executions("acme").Get(ctx(t), e.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deleted project's execution: %v", err)
	}
	if pool, err := c.Pools().Get(ctx(t), "lends", metav1.GetOptions{}); err != nil || len(pool.Spec.Lending.Borrowers) != 1 ||
		pool.Spec.Lending.Borrowers[0].Project != "other" {
		t.Errorf("the deleted project is still a borrower: %v %+v", err, pool.Spec.Lending)
	}
	if n := keysUnder(idempotency.Prefix + "acme/"); n != 0 {
		t.Errorf("%d idempotency records of the deleted project are left", n)
	}
	if n := keysUnder(executionlog.Prefix + "acme/"); n != 0 {
		t.Errorf("%d execution logs of the deleted project are left", n)
	}

	// A new project of the same name, with another customer, inherits nothing.
	if _, err := c.Projects().Create(ctx(t), project("acme", nodusv1.ProjectMember{Name: "zed", Role: nodusv1.ProjectRoleAdmin}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zed := tokenFor(t, s, "zed")
	time.Sleep(time.Second) // give a controller that would wrongly project the old hosts the time to do it
	for _, path := range []string{"/apis/nodus.dev/v1/namespaces/acme/reservedhosts", "/apis/nodus.dev/v1/namespaces/acme/hostlendings",
		"/apis/nodus.dev/v1/namespaces/acme/executions"} {
		r := do(t, zed, "GET", path, "", nil)
		if r.code != 200 || strings.Contains(string(r.body), `"name":"p-`) || strings.Contains(string(r.body), `"name":"e1"`) {
			t.Errorf("the new acme sees the old one's objects at %s: %d %s", path, r.code, r.body)
		}
	}
	// Nor through etcd's history: a list at the old project's revision
	// (Exact, or a limit with a resourceVersion) or its continue token is
	// 410, on which clients list again.
	rv := before.ResourceVersion
	for _, path := range []string{"/apis/nodus.dev/v1/namespaces/acme/reservedhosts?resourceVersionMatch=Exact&resourceVersion=" + rv,
		"/apis/nodus.dev/v1/namespaces/acme/executions?resourceVersionMatch=Exact&resourceVersion=" + rv,
		"/apis/nodus.dev/v1/namespaces/acme/executions?limit=500&resourceVersion=" + rv,
		"/apis/nodus.dev/v1/namespaces/acme/reservedhosts?limit=1&continue=" + url.QueryEscape(before.Continue)} {
		r := do(t, zed, "GET", path, "", nil)
		if r.code != http.StatusGone || envelopeOf(t, r).Reason != metav1.StatusReasonExpired {
			t.Errorf("the new acme reads the old one's history at %s: %d %.400s", path, r.code, r.body)
		}
	}
	// Nor through the watch cache's: a watch from that revision is served
	// without what came before the project (an informer that listed at "0"
	// from a quiet cache watches from a revision older than the project,
	// and must not be refused).
	for _, resource := range []string{"executions", "reservedhosts"} {
		r := do(t, zed, "GET", "/apis/nodus.dev/v1/namespaces/acme/"+resource+"?watch=1&timeoutSeconds=1&resourceVersion="+rv, "", nil)
		if r.code != http.StatusOK || strings.Contains(string(r.body), `"name":"p-`) || strings.Contains(string(r.body), `"name":"e1"`) {
			t.Errorf("the new acme watches the old one's history of %s: %d %.400s", resource, r.code, r.body)
		}
	}
	informer := versioned.NewForConfigOrDie(zed).NodusV1().Executions("acme")
	w, err := informer.Watch(ctx(t), metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatalf("a watch from before the project: %v", err)
	}
	w.Stop()
	if r := f.release(t, zed, "p-released", agreed, "", "Idempotency-Key", "release-once"); r.code != http.StatusNotFound {
		t.Errorf("a replay of the old project's keyed release: %d %s", r.code, r.body)
	}
}

// TestDeletingAnEmptyProject finalizes at once.
func TestDeletingAnEmptyProject(t *testing.T) {
	s := testserver.StartTestServer(t)
	c := s.Client.NodusV1()
	if _, err := c.Projects().Create(ctx(t), project("empty"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := c.Projects().Get(ctx(t), "empty", metav1.GetOptions{})
	if err != nil || len(p.Finalizers) != 1 || p.Finalizers[0] != "nodus.dev/project" {
		t.Fatalf("a new project is finalized: %v %+v", err, p)
	}
	if err := c.Projects().Delete(ctx(t), "empty", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitProjectGone(t, s, "empty")
}

// TestAReservationNeedsALiveProject: a reservation for a project that does
// not exist, or is being deleted, is refused at its creation. It was taken:
// it activated on its node, and a project made later under the name (a
// deleted project's successor, another customer) inherited the host.
func TestAReservationNeedsALiveProject(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	f.node(t, "n1")
	reserve := func(name, project string) error {
		return testfleet.Reserve(ctx(t), s.Client, name, project, nodusv1.ReservationPlacement{Node: "n1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	}
	err := reserve("for-ghost", "ghost")
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Reason != apierror.ReasonProjectNotFound {
		t.Errorf("a reservation for a project that does not exist: %v, want %s", err, apierror.ReasonProjectNotFound)
	}
	// Held in its deletion by a finalizer of someone else's.
	if _, err := c.Projects().Patch(ctx(t), "other", types.MergePatchType, []byte(`{"metadata":{"finalizers":["nodus.dev/project","example.com/hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = c.Projects().Patch(context.Background(), "other", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
	})
	if err := c.Projects().Delete(ctx(t), "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := reserve("for-deleted", "other"); !apierrors.IsForbidden(err) {
		t.Errorf("a reservation for a project being deleted: %v, want forbidden", err)
	}
	for _, name := range []string{"for-ghost", "for-deleted"} {
		if _, err := c.Reservations().Get(ctx(t), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the refused reservation %s was stored: %v", name, err)
		}
	}
}

// TestAProjectKeepsItsFinalizerUntilDeleted replaces a project from a
// manifest that has no finalizers, as kubectl replace does: the finalizer
// came off, and a delete before the controller put it back freed the name
// with the project's reservations, executions and logs left behind.
func TestAProjectKeepsItsFinalizerUntilDeleted(t *testing.T) {
	s := testserver.StartTestServer(t)
	c := s.Client.NodusV1().Projects()
	if _, err := c.Create(ctx(t), project("kept"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := c.Get(ctx(t), "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Finalizers = nil
	p.Spec.DisplayName = "replaced"
	updated, err := c.Update(ctx(t), p, metav1.UpdateOptions{})
	if err != nil || updated.Spec.DisplayName != "replaced" || !slices.Contains(updated.Finalizers, "nodus.dev/project") {
		t.Fatalf("a project replaced without its finalizer: %v %+v", err, updated)
	}
}

// TestANewProjectInheritsNothingLeftBehind: emptying a deleted project
// lists its executions and then lets the project go; an execution admitted
// while the project still stood can land after that list (its admission
// read the project, its write came later), with its output. A project made
// later under the name, another customer's, showed it: its command, its
// environment, its log. What predates the new project in its namespace is
// deleted when the project is made.
func TestANewProjectInheritsNothingLeftBehind(t *testing.T) {
	s := testserver.StartTestServer(t)
	c := s.Client.NodusV1()
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	bob := tokenFor(t, s, "bob")
	const key = "/registry/nodus.dev/executions/gamma/late"
	// A project made by POST, and one made by a server-side apply (an
	// update that creates).
	for i, made := range []func() (*nodusv1.Project, error){
		func() (*nodusv1.Project, error) {
			return c.Projects().Create(ctx(t), project("gamma", nodusv1.ProjectMember{Name: "bob", Role: nodusv1.ProjectRoleViewer}), metav1.CreateOptions{})
		},
		func() (*nodusv1.Project, error) {
			return c.Projects().Patch(ctx(t), "gamma", types.ApplyPatchType,
				[]byte(`{"apiVersion":"nodus.dev/v1","kind":"Project","metadata":{"name":"gamma"},"spec":{"members":[{"name":"bob","role":"viewer"}]}}`),
				metav1.PatchOptions{FieldManager: "t"})
		},
	} {
		if _, err := c.Projects().Create(ctx(t), project("gamma"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Projects().Delete(ctx(t), "gamma", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitProjectGone(t, s, "gamma")
		// What the late write leaves: the execution, and its output.
		late := `{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"name":"late","namespace":"gamma","uid":"5d1c7a52-3c1e-4f7e-9a8b-1c2d3e4f5a6b",` +
			`"creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"pool":"lends","command":["train"],"env":[{"name":"HF_TOKEN","value":"secret"}],"maxRuntimeSeconds":60},` +
			`"status":{"phase":"pending"}}`
		if _, err := etcd.Put(ctx(t), key, late); err != nil {
			t.Fatal(err)
		}
		if err := executionlog.NewStore(etcd).Put(ctx(t), "gamma", "late", "5d1c7a52-3c1e-4f7e-9a8b-1c2d3e4f5a6b", executionlog.Log{Data: []byte("earlier output")}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the late execution", func(cx context.Context) (*nodusv1.Execution, error) {
			return c.Executions("gamma").Get(cx, "late", metav1.GetOptions{})
		}, func(*nodusv1.Execution) bool { return true })

		// Another customer makes a project of the name: once it exists, its
		// namespace holds nothing of the earlier one (the creation sweeps
		// before it answers).
		p, err := made()
		if err != nil {
			t.Fatal(err)
		}
		if applied := slices.ContainsFunc(p.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
			return m.Manager == "t" && m.Operation == metav1.ManagedFieldsOperationApply
		}); applied != (i == 1) {
			t.Errorf("made %d: the apply's field manager recorded %v: %+v", i, applied, p.ManagedFields)
		}
		for _, prefix := range []string{key, executionlog.Prefix + "gamma/"} {
			if resp, err := etcd.Get(ctx(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
				t.Errorf("%s is still kept when the project is made", prefix)
			}
		}
		list, err := c.Executions("gamma").List(ctx(t), metav1.ListOptions{}) // a consistent read: after the creation's answer
		if err != nil || len(list.Items) != 0 {
			t.Errorf("the new project shows an execution of the earlier one: %v %+v", err, list)
		}
		// Nor its history from the project's birth on: a list at the
		// project's own revision, and a watch from it, which would replay
		// the sweep's deletions with the objects deleted.
		for _, path := range []string{
			"/apis/nodus.dev/v1/namespaces/gamma/executions?resourceVersion=" + p.ResourceVersion + "&resourceVersionMatch=Exact",
			"/apis/nodus.dev/v1/namespaces/gamma/executions?watch=1&timeoutSeconds=2&resourceVersion=" + p.ResourceVersion,
		} {
			if r := do(t, bob, "GET", path, "", nil); strings.Contains(string(r.body), "secret") || strings.Contains(string(r.body), `"late"`) {
				t.Errorf("a member of the new project reads the earlier one's execution: GET %s: %d %.400s", path, r.code, r.body)
			}
		}
		if err := c.Projects().Delete(ctx(t), "gamma", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitProjectGone(t, s, "gamma")
	}
	// A create refused for its name sweeps nothing: "acme/e1" is no
	// project's name, and what project acme keeps for e1 stays.
	if _, err := c.Projects().Create(ctx(t), project("acme"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := executionlog.NewStore(etcd).Put(ctx(t), "acme", "e1", "6e2d8b63-4d2f-4f8f-8b9c-2d3e4f5a6b7c", executionlog.Log{Data: []byte("acme's output")}); err != nil {
		t.Fatal(err)
	}
	if r := do(t, s.Config, "POST", "/apis/nodus.dev/v1/projects", "application/json", strings.NewReader(
		`{"apiVersion":"nodus.dev/v1","kind":"Project","metadata":{"name":"acme/e1"}}`)); r.code/100 != 4 {
		t.Errorf("a project named acme/e1: %d %.300s", r.code, r.body)
	}
	if resp, err := etcd.Get(ctx(t), executionlog.Prefix+"acme/e1/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
		t.Errorf("acme's log for e1 after a refused create of project acme/e1: %v (kept: %v)", err, err == nil && resp.Count == 1)
	}
}

// waitProjectGone waits until the project's deletion is finalized.
func waitProjectGone(t *testing.T, s *testserver.Server, name string) {
	t.Helper()
	if err := testfleet.Eventually(ctx(t), 60*time.Second, func(cx context.Context) (bool, error) {
		_, err := s.Client.NodusV1().Projects().Get(cx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("project %s was never finalized", name)
	}
}

// TestADeletedProjectGivesNoMoreCertificates: a project deleted with its
// live reservations (--retire-reservations) stays until the project
// controller has retired them: milliseconds, or as long as no controller
// leads. Meanwhile its members got fresh SSH certificates for its hosts,
// valid for up to an hour at the current epoch.
func TestADeletedProjectGivesNoMoreCertificates(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.host(t, "farewell", now.Add(-time.Hour), now.Add(time.Hour))
	certify := func() response {
		body, _ := json.Marshal(map[string]string{"publicKey": testfleet.HostKey("mary's laptop")})
		return do(t, f.member, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/farewell/ssh-certificate", "application/json",
			strings.NewReader(string(body)))
	}
	if r := certify(); r.code != http.StatusCreated && r.code != http.StatusOK {
		t.Fatalf("a member's certificate before the deletion: %d %s", r.code, r.body)
	}
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	giveBack := takeTheLead(t, etcd)
	projects := s.Client.NodusV1().Projects()
	p, err := projects.Get(ctx(t), "acme", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{nodusv1.AnnotationRetireReservations: "true"}
	if _, err := projects.Update(ctx(t), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := projects.Delete(ctx(t), "acme", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := certify(); r.code != http.StatusForbidden || !strings.Contains(string(r.body), "being deleted") {
		t.Errorf("a member's certificate while the project is being deleted: %d %s", r.code, r.body)
	}
	giveBack()
	waitProjectGone(t, s, "acme")
}

// TestACertificateEndsWithItsToken: an SSH certificate was valid for an
// hour (or to the term's end), however soon the token it was asked with
// expired: a contractor's two-hour token let them in for an hour past it.
// The certificate ends when the token does.
func TestACertificateEndsWithItsToken(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.host(t, "short", now.Add(-time.Hour), now.Add(3*time.Hour))
	expires := metav1.NewTime(now.Add(10 * time.Minute).Truncate(time.Second))
	tok, err := s.Client.NodusV1().AccessTokens().Create(ctx(t), &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{GenerateName: "contractor-"},
		Spec: nodusv1.AccessTokenSpec{User: "mary", ExpiresAt: &expires}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"publicKey": testfleet.HostKey("mary's laptop")})
	r := do(t, bearer(s, tok.Status.Token), "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/short/ssh-certificate", "application/json",
		strings.NewReader(string(body)))
	var cert nodusv1.ReservedHostSSHCertificate
	if err := json.Unmarshal(r.body, &cert); (r.code != http.StatusOK && r.code != http.StatusCreated) || err != nil || cert.ValidBefore == nil {
		t.Fatalf("a certificate: %d %s", r.code, r.body)
	}
	if cert.ValidBefore.After(expires.Time) {
		t.Errorf("a certificate valid until %s, asked with a token that expires at %s", cert.ValidBefore.UTC(), expires.UTC())
	}
}
