package reservedhost

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apivalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/actions"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
)

// ReleaseREST serves POST reservedhosts/{name}/release-capacity: the owner
// retires its access and drains lending, irreversibly, under the epoch it
// reviewed. The Reservation is the record of truth, written here through
// pkg/lifecycle; the answer is the ReservedHost as the reservation
// controller, its one writer, projects it.
type ReleaseREST struct {
	Hosts        *genericregistry.Store // reservedhosts/status
	Reservations *genericregistry.Store // reservations/status
	Now          func() time.Time
}

var (
	_ rest.NamedCreater    = &ReleaseREST{}
	_ rest.StorageMetadata = &ReleaseREST{}
)

func (r *ReleaseREST) New() runtime.Object { return &nodusv1.ReservedHostReleaseRequest{} }
func (r *ReleaseREST) Destroy()            {}

// ProducesMIMETypes implements rest.StorageMetadata.
func (r *ReleaseREST) ProducesMIMETypes(string) []string { return nil }

// ProducesObject says the answer is the ReservedHost, for the OpenAPI document.
func (r *ReleaseREST) ProducesObject(string) interface{} { return nodusv1.ReservedHost{} }

// Create performs the release.
func (r *ReleaseREST) Create(ctx context.Context, name string, obj runtime.Object, _ rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	req, ok := obj.(*nodusv1.ReservedHostReleaseRequest)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a ReservedHostReleaseRequest, got %T", obj))
	}
	namespace, _ := genericapirequest.NamespaceFrom(ctx)
	ex := exchange.From(ctx)
	gr := nodusv1.Resource("reservedhosts")

	key, own := actions.RequestKey(ctx), actions.Recognizer(ctx)
	current, err := r.Hosts.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	// A retry sends the If-Match it was first sent with, and the host may
	// have moved past it since its effect (a release moves it itself):
	// only the replay of that effect may pass, below.
	stale := checkIfMatch(ctx, current.(*nodusv1.ReservedHost))
	if stale != nil {
		if released, err := r.releasedBy(ctx, namespace, name, key, own, req.Epoch); err != nil {
			return nil, err
		} else if !released {
			return nil, stale
		}
	}
	if req.Agreed == nil || !*req.Agreed {
		return nil, apierror.New(ctx, apierror.ReasonReleaseNotAgreed, gr, name,
			`"agreed" must be true: a release retires access for good and does not shorten the term`, "")
	}
	if req.Epoch == nil {
		return nil, apierror.New(ctx, apierror.ReasonEpochRequired, gr, name,
			`"epoch" is required: send the status.reservation.epoch you reviewed`, "")
	}

	now := metav1.NewTime(r.now().Truncate(time.Second))
	manager := managerName(options.FieldManager, ex.RequestHeader("User-Agent"))
	replayed := false
	updated, _, err := r.Reservations.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil,
		func(ctx context.Context, _, old runtime.Object) (runtime.Object, error) {
			res := old.(*nodusv1.Reservation).DeepCopy()
			if res.Spec.Project != namespace {
				return nil, apierrors.NewNotFound(gr, name)
			}
			// This very request released it before a crash cut its answer.
			if replayed = ownRelease(res, own, *req.Epoch); replayed {
				return res, nil
			}
			if stale != nil {
				return nil, stale
			}
			if err := lifecycle.CheckOwnerChange(ctx, res, *req.Epoch, now.Time); err != nil {
				return nil, err
			}
			lifecycle.Release(res, manager, now.Time)
			res.Status.ReleaseRequest = key
			return res, nil
		}), nil, nil, false, &metav1.UpdateOptions{DryRun: options.DryRun})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(gr, name)
	}
	if err != nil {
		return nil, err
	}
	// The answer shows the release as the host will: the reservation
	// controller, the one writer of ReservedHosts, projects it in a moment.
	res := updated.(*nodusv1.Reservation)
	answer := current.(*nodusv1.ReservedHost).DeepCopy()
	ApplyReservation(answer, res)
	if replayed {
		actions.MarkReplayed(ctx)
		now = res.Status.Release.RequestedAt
		manager = res.Status.ReleaseFieldManager
	}
	RecordRelease(answer, manager, now)
	ex.SetResponseHeader("ETag", ETag(answer))
	return answer, nil
}

// releasedBy says whether the request of key (own recognises its
// references) released reservation name of namespace already, under epoch.
func (r *ReleaseREST) releasedBy(ctx context.Context, namespace, name, key string, own func(string) bool, epoch *int64) (bool, error) {
	if key == "" || epoch == nil {
		return false, nil
	}
	res, err := projectReservation(ctx, r.Reservations, namespace, name)
	return res != nil && ownRelease(res, own, *epoch), err
}

// projectReservation reads reservation name, or nil when there is none or
// it is not namespace's.
func projectReservation(ctx context.Context, reservations *genericregistry.Store, namespace, name string) (*nodusv1.Reservation, error) {
	obj, err := reservations.Get(ctx, name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if res := obj.(*nodusv1.Reservation); res.Spec.Project == namespace {
		return res, nil
	}
	return nil, nil
}

// ownRelease says whether res was released by the request own recognises,
// under epoch: its effect, whose answer a crash cut.
func ownRelease(res *nodusv1.Reservation, own func(string) bool, epoch int64) bool {
	return own(res.Status.ReleaseRequest) && res.Status.Release != nil && res.Status.Epoch == epoch+1 &&
		(res.Status.State == nodusv1.ReservationStateReleasing || res.Status.State == nodusv1.ReservationStateReleased)
}

// ReleaseSubresource names the managedFields entries of release requests.
const ReleaseSubresource = "release-capacity"

// releaseFields are the fields a release sets, in managedFields' FieldsV1 form.
const releaseFields = `{"f:status":{"f:release":{".":{},"f:requestedAt":{}},"f:reservation":{"f:epoch":{},"f:state":{}}}}`

// RecordRelease records the release in h's managedFields under manager,
// with subresource release-capacity, replacing an older entry of the same
// manager. It reports whether h changed.
func RecordRelease(h *nodusv1.ReservedHost, manager string, at metav1.Time) bool {
	entry := metav1.ManagedFieldsEntry{
		Manager:     manager,
		Operation:   metav1.ManagedFieldsOperationUpdate,
		APIVersion:  nodusv1.SchemeGroupVersion.String(),
		Time:        &at,
		FieldsType:  "FieldsV1",
		FieldsV1:    &metav1.FieldsV1{Raw: []byte(releaseFields)},
		Subresource: ReleaseSubresource,
	}
	var fields []metav1.ManagedFieldsEntry
	for _, f := range h.ManagedFields {
		if f.Manager == manager && f.Operation == entry.Operation && f.Subresource == entry.Subresource {
			if f.Time != nil && f.Time.Equal(&at) {
				return false // recorded already
			}
			continue
		}
		fields = append(fields, f)
	}
	h.ManagedFields = append(fields, entry)
	return true
}

// managerName is the fieldManager (which the library validated), or, as
// Kubernetes makes it, the client's user agent up to its first '/', its
// printable characters only, within a manager name's length. A manager
// name Kubernetes refuses would fail every later write of the host, the
// handover after the release with it.
func managerName(fieldManager, userAgent string) string {
	if fieldManager != "" {
		return fieldManager
	}
	prefix, _, _ := strings.Cut(userAgent, "/")
	var name strings.Builder
	for _, r := range prefix {
		if !unicode.IsPrint(r) {
			continue
		}
		if name.Len()+utf8.RuneLen(r) > apivalidation.FieldManagerMaxLength {
			break
		}
		name.WriteRune(r)
	}
	if name.Len() == 0 {
		return "unknown"
	}
	return name.String()
}

func (r *ReleaseREST) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
