package localwrite_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	auditlog "k8s.io/apiserver/plugin/pkg/audit/log"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/generated/applyconfiguration"
	"github.com/nodus-dev/nodus/pkg/localwrite"
	"github.com/nodus-dev/nodus/pkg/registry/allocation"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

const manager = "nodus-allocation-controller"

// clusterScoped is a request's context for Allocations, as the API's
// handlers give their stores.
var clusterScoped = request.WithNamespace(context.Background(), "")

var loopbackUser = &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}

// fixture is the Allocation kind's stores on a real etcd, as the server
// builds them, and what a writer of its status is given: the field
// manager's types are the generated apply configurations' (the server's
// are built from the same OpenAPI definitions, as it serves them).
type fixture struct {
	stores base.Stores
	opts   localwrite.Options
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	etcd, err := embeddedetcd.StartInsecure(t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Stop(context.Background()) })
	scheme := runtime.NewScheme()
	if err := nodusv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme)
	config := storagebackend.NewDefaultConfig("/registry", codecs.LegacyCodec(nodusv1.SchemeGroupVersion))
	config.Transport.ServerList = []string{etcd.ClientURL}
	resource := nodusv1.Resource("allocations")
	options := generic.RESTOptions{StorageConfig: config.ForResource(resource), Decorator: generic.UndecoratedStorage,
		DeleteCollectionWorkers: 1, ResourcePrefix: "/" + resource.Group + "/" + resource.Resource}
	stores, err := base.NewStore(scheme, options, allocation.Kind())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stores.Main.DestroyFunc)
	return &fixture{stores: stores, opts: localwrite.Options{Scheme: scheme, TypeConverter: applyconfiguration.NewTypeConverter(scheme),
		Admission: admission.NewChainHandler(), Serializer: codecs, User: loopbackUser, UserAgent: "nodus-server (in process)"}}
}

func (f *fixture) writer(t *testing.T, opts localwrite.Options) *localwrite.Status {
	t.Helper()
	w, err := localwrite.NewStatus(f.stores.Status, nodusv1.SchemeGroupVersion.WithResource("allocations"),
		nodusv1.SchemeGroupVersion.WithKind("Allocation"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// creator is the manager of the allocations' creates.
const creator = "kubectl-create"

// create stores a new Allocation through the main store, as the API's
// create handler does: the field manager's record of the creator's fields
// first (without it no later write is recorded either).
func (f *fixture) create(t *testing.T, name string) *nodusv1.Allocation {
	t.Helper()
	kind := nodusv1.SchemeGroupVersion.WithKind("Allocation")
	fields, err := managedfields.NewDefaultFieldManager(f.opts.TypeConverter, runtime.UnsafeObjectConvertor(f.opts.Scheme),
		f.opts.Scheme, f.opts.Scheme, kind, kind.GroupVersion(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	created, err := fields.Update(&nodusv1.Allocation{}, &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-h100x8"}}, creator)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := f.stores.Main.Create(clusterScoped, created, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*nodusv1.Allocation)
}

func (f *fixture) get(t *testing.T, name string) *nodusv1.Allocation {
	t.Helper()
	obj, err := f.stores.Main.Get(clusterScoped, name, &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*nodusv1.Allocation)
}

// active is a's status as the controller writes it once it claimed node.
func active(a *nodusv1.Allocation, node string) *nodusv1.Allocation {
	next := a.DeepCopy()
	next.Status = nodusv1.AllocationStatus{State: nodusv1.AllocationStateActive, Node: node}
	return next
}

// auditTo is opts writing every request's event, with its request object,
// to out as the server's log backend writes them.
func auditTo(opts localwrite.Options, out *os.File) localwrite.Options {
	opts.AuditBackend = auditlog.NewBackend(out, auditlog.FormatJson, auditv1.SchemeGroupVersion)
	opts.AuditPolicy = policy.NewPolicyRuleEvaluator(&auditinternal.Policy{
		Rules: []auditinternal.PolicyRule{{Level: auditinternal.LevelRequest}}})
	return opts
}

// events reads the audit log at path.
func events(t *testing.T, path string) []auditv1.Event {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []auditv1.Event
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e auditv1.Event
		if err := runtime.DecodeInto(auditDecoder, line, &e); err != nil {
			t.Fatalf("an audit line: %v: %s", err, line)
		}
		out = append(out, e)
	}
	return out
}

var auditDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	if err := auditv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(scheme).UniversalDecoder(auditv1.SchemeGroupVersion)
}()

func logFile(t *testing.T) (*os.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

// TestAWriteKeepsTheSpecAndRecordsItsManager: a status write changes the
// status alone, whatever spec it carries, names its manager's fields, and
// is audited as the loopback user's update of the status, request and
// outcome.
func TestAWriteKeepsTheSpecAndRecordsItsManager(t *testing.T) {
	f := newFixture(t)
	out, path := logFile(t)
	w := f.writer(t, auditTo(f.opts, out))
	a := f.create(t, "a")
	next := active(a, "node-1")
	next.Spec.ResourceClass = "gpu-other"
	written, err := w.Update(context.Background(), next, manager)
	if err != nil {
		t.Fatal(err)
	}
	stored := f.get(t, "a")
	if stored.Spec.ResourceClass != "gpu-h100x8" {
		t.Errorf("the spec moved to %q through the status", stored.Spec.ResourceClass)
	}
	if stored.Status.State != nodusv1.AllocationStateActive || stored.Status.Node != "node-1" {
		t.Errorf("stored status %+v, want active on node-1", stored.Status)
	}
	if written.(*nodusv1.Allocation).ResourceVersion != stored.ResourceVersion {
		t.Errorf("the write answered resourceVersion %s, the store holds %s", written.(*nodusv1.Allocation).ResourceVersion, stored.ResourceVersion)
	}
	var recorded, kept bool
	for _, m := range stored.ManagedFields {
		switch {
		case m.Manager == manager && m.Subresource == "status" && m.Operation == metav1.ManagedFieldsOperationUpdate:
			recorded = m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), `"f:node"`)
		case m.Manager == creator:
			kept = m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), `"f:resourceClass"`)
		}
	}
	if !recorded || !kept {
		t.Errorf("managedFields %+v: want %s's status fields, and %s's spec kept", stored.ManagedFields, manager, creator)
	}

	got := events(t, path)
	if len(got) != 2 {
		t.Fatalf("%d audit events, want the write's two stages: %+v", len(got), got)
	}
	received, complete := got[0], got[1]
	if received.Stage != auditv1.StageRequestReceived || complete.Stage != auditv1.StageResponseComplete {
		t.Errorf("stages %s, %s", received.Stage, complete.Stage)
	}
	if received.AuditID == "" || received.AuditID != complete.AuditID {
		t.Errorf("audit ids %q and %q, want one of the write's own", received.AuditID, complete.AuditID)
	}
	if complete.User.Username != user.APIServerUser || complete.Verb != "update" || complete.ObjectRef == nil ||
		complete.ObjectRef.Resource != "allocations" || complete.ObjectRef.Subresource != "status" || complete.ObjectRef.Name != "a" {
		t.Errorf("event of %s %s %+v, want %s's update of allocations/a/status", complete.User.Username, complete.Verb, complete.ObjectRef, user.APIServerUser)
	}
	if complete.ResponseStatus == nil || complete.ResponseStatus.Code != 200 {
		t.Errorf("response status %+v, want 200", complete.ResponseStatus)
	}
	if complete.RequestObject == nil || !strings.Contains(string(complete.RequestObject.Raw), `"node-1"`) {
		t.Errorf("the request object is not the written one: %v", complete.RequestObject)
	}
	if complete.UserAgent != "nodus-server (in process)" || !strings.Contains(complete.RequestURI, "fieldManager="+manager) {
		t.Errorf("user agent %q, URI %q", complete.UserAgent, complete.RequestURI)
	}
}

// TestAWriteWhoseAuditEventCannotBeStoredIsNotMade: as the audit filter
// refuses a request whose event the backend does not take, a write that
// cannot be audited leaves the object as it was.
func TestAWriteWhoseAuditEventCannotBeStoredIsNotMade(t *testing.T) {
	f := newFixture(t)
	out, _ := logFile(t)
	out.Close() // every event written to it fails
	w := f.writer(t, auditTo(f.opts, out))
	a := f.create(t, "a")
	_, err := w.Update(context.Background(), active(a, "node-1"), manager)
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "audit event") {
		t.Errorf("an unaudited write answered %v, want an internal error naming the audit event", err)
	}
	if stored := f.get(t, "a"); stored.ResourceVersion != a.ResourceVersion || stored.Status.Node != "" {
		t.Errorf("the unaudited write was stored: resourceVersion %s → %s, node %q", a.ResourceVersion, stored.ResourceVersion, stored.Status.Node)
	}
}

// refuseNode is a validating admission plugin that refuses any status
// naming node.
type refuseNode struct {
	*admission.Handler
	node string
}

func (p refuseNode) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if next, ok := a.GetObject().(*nodusv1.Allocation); ok && next.Status.Node == p.node {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(), errors.New("node "+p.node+" is refused"))
	}
	return nil
}

// setError is a mutating admission plugin that writes a status field of
// its own.
type setError struct{ *admission.Handler }

func (setError) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if next, ok := a.GetObject().(*nodusv1.Allocation); ok {
		next.Status.LastError = "set by admission"
	}
	return nil
}

// TestAdmissionJudgesEveryWrite: the server's admission chain runs on a
// write in process as on one through the API: a mutating plugin's change
// is stored, a validating plugin's refusal is the caller's error, stores
// nothing, and is audited with its code.
func TestAdmissionJudgesEveryWrite(t *testing.T) {
	f := newFixture(t)
	out, path := logFile(t)
	opts := auditTo(f.opts, out)
	opts.Admission = admission.NewChainHandler(setError{admission.NewHandler(admission.Update)},
		refuseNode{Handler: admission.NewHandler(admission.Update), node: "node-refused"})
	w := f.writer(t, opts)
	a := f.create(t, "a")

	_, err := w.Update(context.Background(), active(a, "node-refused"), manager)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "node node-refused is refused") {
		t.Errorf("a refused write answered %v, want the plugin's refusal", err)
	}
	if stored := f.get(t, "a"); stored.ResourceVersion != a.ResourceVersion {
		t.Errorf("the refused write was stored: resourceVersion %s → %s", a.ResourceVersion, stored.ResourceVersion)
	}
	got := events(t, path)
	if len(got) == 0 || got[len(got)-1].ResponseStatus == nil || got[len(got)-1].ResponseStatus.Code != 403 {
		t.Errorf("the refusal's audit events %+v, want the last with code 403", got)
	}

	if _, err := w.Update(context.Background(), active(a, "node-1"), manager); err != nil {
		t.Fatal(err)
	}
	if stored := f.get(t, "a"); stored.Status.Node != "node-1" || stored.Status.LastError != "set by admission" {
		t.Errorf("stored status %+v, want node-1 with the mutating plugin's lastError", stored.Status)
	}
}

// TestAStaleOrMissingObjectIsNotWritten: a write under a resourceVersion the
// object moved past is a conflict, and one of an object that is not there
// creates nothing.
func TestAStaleOrMissingObjectIsNotWritten(t *testing.T) {
	f := newFixture(t)
	w := f.writer(t, f.opts)
	a := f.create(t, "a")
	if _, err := w.Update(context.Background(), active(a, "node-1"), manager); err != nil {
		t.Fatal(err)
	}
	_, err := w.Update(context.Background(), active(a, "node-2"), manager)
	if !apierrors.IsConflict(err) {
		t.Errorf("a write under the old resourceVersion answered %v, want a conflict", err)
	}
	if stored := f.get(t, "a"); stored.Status.Node != "node-1" {
		t.Errorf("the stale write was stored: node %q", stored.Status.Node)
	}

	missing := active(&nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: "missing", ResourceVersion: a.ResourceVersion}}, "node-3")
	_, err = w.Update(context.Background(), missing, manager)
	if !apierrors.IsNotFound(err) {
		t.Errorf("a write of a missing allocation answered %v, want not found", err)
	}
	if _, err := f.stores.Main.Get(clusterScoped, "missing", &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the write of a missing allocation created it: %v", err)
	}
}
