// Package localwrite writes an object's status through its kind's registry
// store in the server's own process, as the API's update handler writes it
// for the server's loopback user, without the HTTP round trip and the JSON
// both ways.
//
// What the handler does to a status update stays: the store's optimistic
// concurrency and its strategy (the spec kept, the status validated),
// admission, the field manager's record of which manager wrote which
// fields, and the audit event the policy asks for, with the request object.
// What is left out is what the loopback user does not need: the
// authentication of the loopback token (the user is the one it
// authenticates as) and the authorization of system:masters.
//
// The allocation controller's claim of a node and its status write of the
// allocation take it: what the loopback's HTTP and JSON cost them was a
// fifth to a third of an allocation's server CPU (docs/performance.md,
// "The controller's writes in process").
package localwrite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/admission"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/nodus-dev/nodus/pkg/loopback"
)

// subresource is the one subresource written here.
const subresource = "status"

// timeout bounds a write as the API's update handler bounds one: a store
// that does not answer does not hold the caller for good.
const timeout = 34 * time.Second

// Options are what every kind's writer shares.
type Options struct {
	Scheme *runtime.Scheme
	// TypeConverter is the one the API's field managers use (from the
	// group's OpenAPI).
	TypeConverter managedfields.TypeConverter
	Admission     admission.Interface
	// AuditBackend and AuditPolicy are the server's; without either no
	// event is written, as the generic chain writes none.
	AuditBackend audit.Sink
	AuditPolicy  audit.PolicyRuleEvaluator
	// Serializer encodes the audit event's request object.
	Serializer runtime.NegotiatedSerializer
	// User writes: the server's loopback user, as the token of its
	// loopback client authenticates.
	User user.Info
	// UserAgent is the audit event's, which tells these writes from the
	// loopback's.
	UserAgent string
}

// Status writes one kind's status subresource.
type Status struct {
	opts     Options
	store    *genericregistry.Store
	resource schema.GroupVersionResource
	kind     schema.GroupVersionKind
	fields   *managedfields.FieldManager
	objects  admission.ObjectInterfaces
	// admit is opts.Admission as the update handler wraps it: admission's
	// audit annotations, and the check of what it did to managedFields.
	admit admission.Interface
}

// NewStatus is the writer of resource's status through store (the status
// subresource's store), whose objects are of kind.
func NewStatus(store *genericregistry.Store, resource schema.GroupVersionResource, kind schema.GroupVersionKind, opts Options) (*Status, error) {
	if opts.Scheme == nil || opts.TypeConverter == nil || opts.User == nil {
		return nil, errors.New("localwrite: Scheme, TypeConverter and User are required")
	}
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	if fields := store.GetResetFields(); fields != nil {
		reset = fieldpath.NewExcludeFilterSetMap(fields)
	}
	// As the API installs the field manager of a status subresource.
	fields, err := managedfields.NewDefaultFieldManager(opts.TypeConverter, runtime.UnsafeObjectConvertor(opts.Scheme),
		opts.Scheme, opts.Scheme, kind, kind.GroupVersion(), subresource, reset)
	if err != nil {
		return nil, fmt.Errorf("localwrite: the field manager of %s: %w", resource, err)
	}
	return &Status{opts: opts, store: store, resource: resource, kind: kind, fields: fields,
		objects: admission.NewObjectInterfacesFromScheme(opts.Scheme),
		admit:   fieldmanager.NewManagedFieldsValidatingAdmissionController(admission.WithAudit(opts.Admission))}, nil
}

// Update writes obj's status as manager, under obj's resourceVersion (a
// conflict when the stored object moved past it), and returns the object
// as stored. Its errors are the API's: a conflict is IsConflict, a refusal
// carries its status.
func (s *Status) Update(ctx context.Context, obj runtime.Object, manager string) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	name, namespace := m.GetName(), m.GetNamespace()
	ctx, attrs := s.requestOf(ctx, namespace, name)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	options := &metav1.UpdateOptions{FieldManager: manager}
	ctx, finish, err := s.audit(ctx, attrs, obj, manager)
	if err != nil {
		return nil, err
	}
	out, err := s.write(ctx, namespace, name, obj, options)
	finish(err)
	return out, err
}

// write is the update handler's store call: the field manager and
// mutating admission transform the object against the stored one, then
// validating admission and the strategy judge it.
func (s *Status) write(ctx context.Context, namespace, name string, obj runtime.Object, options *metav1.UpdateOptions) (runtime.Object, error) {
	admit := s.admit
	transformers := []rest.TransformFunc{func(_ context.Context, next, live runtime.Object) (runtime.Object, error) {
		return s.fields.UpdateNoErrors(live, next, options.FieldManager), nil
	}}
	if mutating, ok := admit.(admission.MutationInterface); ok && mutating.Handles(admission.Update) {
		transformers = append(transformers, func(ctx context.Context, next, old runtime.Object) (runtime.Object, error) {
			return next, mutating.Admit(ctx, s.attributes(next, old, namespace, name, options), s.objects)
		})
	}
	// A status write never creates its object (the store refuses it too:
	// the status strategy does not allow create on update).
	noCreate := func(context.Context, runtime.Object) error {
		return apierrors.NewNotFound(s.resource.GroupResource(), name)
	}
	out, _, err := s.store.Update(ctx, name, rest.DefaultUpdatedObjectInfo(obj, transformers...), noCreate,
		rest.AdmissionToValidateObjectUpdateFunc(admit, s.attributes(nil, nil, namespace, name, options), s.objects), false, options)
	return out, err
}

func (s *Status) attributes(obj, old runtime.Object, namespace, name string, options *metav1.UpdateOptions) admission.Attributes {
	return admission.NewAttributesRecord(obj, old, s.kind, namespace, name, s.resource, subresource, admission.Update, options, false, s.opts.User)
}

// requestOf is the context the generic chain gives an update of the status
// of namespace/name, with the request's authorizer attributes.
func (s *Status) requestOf(ctx context.Context, namespace, name string) (context.Context, authorizer.AttributesRecord) {
	parts := []string{s.resource.Resource, name, subresource}
	path := "/apis/" + s.resource.Group + "/" + s.resource.Version + "/"
	if namespace != "" {
		path += "namespaces/" + namespace + "/"
	}
	path += s.resource.Resource + "/" + name + "/" + subresource
	info := &request.RequestInfo{IsResourceRequest: true, Path: path, Verb: "update", APIPrefix: "apis",
		APIGroup: s.resource.Group, APIVersion: s.resource.Version, Namespace: namespace,
		Resource: s.resource.Resource, Subresource: subresource, Name: name, Parts: parts}
	attrs := authorizer.AttributesRecord{User: s.opts.User, Verb: "update", Namespace: namespace,
		APIGroup: s.resource.Group, APIVersion: s.resource.Version, Resource: s.resource.Resource,
		Subresource: subresource, Name: name, ResourceRequest: true, Path: path}
	ctx = request.WithRequestInfo(request.WithUser(ctx, s.opts.User), info)
	return request.WithNamespace(ctx, namespace), attrs
}

// audit starts the write's audit event as the generic chain's audit filter
// does, when the policy records it, and returns what completes it with
// the write's outcome. As that filter refuses a request whose event it
// cannot start, a write whose event cannot be started is not made.
func (s *Status) audit(ctx context.Context, attrs authorizer.AttributesRecord, obj runtime.Object, manager string) (context.Context, func(error), error) {
	unaudited := func(error) {}
	if s.opts.AuditBackend == nil || s.opts.AuditPolicy == nil {
		return ctx, unaudited, nil
	}
	ctx = audit.WithAuditContext(ctx)
	audit.WithAuditID(ctx, uuid.NewUUID())
	ac := audit.AuditContextFrom(ctx)
	if err := ac.Init(s.opts.AuditPolicy.EvaluatePolicyRule(attrs), s.opts.AuditBackend); err != nil {
		return nil, nil, apierrors.NewInternalError(fmt.Errorf("the audit event of the write: %w", err))
	}
	if !ac.Enabled() {
		return ctx, unaudited, nil
	}
	uri := &url.URL{Path: attrs.Path, RawQuery: url.Values{"fieldManager": {manager}}.Encode()}
	// From the loopback's address, as the loopback's writes are.
	req := &http.Request{Method: http.MethodPut, URL: uri, RequestURI: uri.RequestURI(), RemoteAddr: loopback.RemoteAddr,
		Header: http.Header{"User-Agent": {s.opts.UserAgent}}}
	audit.LogRequestMetadata(ctx, req, time.Now(), attrs)
	if !ac.ProcessEventStage(ctx, auditinternal.StageRequestReceived) {
		audit.ApiserverAuditDroppedCounter.WithContext(ctx).Inc()
		return nil, nil, apierrors.NewInternalError(errors.New("failed to store the write's audit event"))
	}
	audit.LogRequestObject(ctx, obj, s.resource.GroupVersion(), s.resource, subresource, s.opts.Serializer)
	return ctx, func(err error) {
		if err == nil {
			ac.SetEventResponseStatusCode(http.StatusOK)
		} else {
			status := apierrors.APIStatus(apierrors.NewInternalError(err))
			var known apierrors.APIStatus
			if errors.As(err, &known) {
				status = known
			}
			ac.SetEventResponseStatus(ptr(status.Status()))
		}
		ac.ProcessEventStage(ctx, auditinternal.StageResponseComplete)
	}, nil
}

func ptr[T any](v T) *T { return &v }
