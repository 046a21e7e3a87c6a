package validation

import (
	"fmt"
	"maps"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// ValidateAllocation checks an Allocation request.
func ValidateAllocation(a *nodusv1.Allocation) field.ErrorList {
	errs := validateClusterMeta(&a.ObjectMeta)
	spec := field.NewPath("spec")
	errs = append(errs, validateResourceClass(a.Spec.ResourceClass, spec.Child("resourceClass"), a.Spec.Node == "")...)
	errs = append(errs, validateTraits(a.Spec.Traits, spec.Child("traits"))...)
	candidates := spec.Child("candidateNodes")
	if len(a.Spec.CandidateNodes) > MaxCandidates {
		errs = append(errs, field.TooMany(candidates, len(a.Spec.CandidateNodes), MaxCandidates))
	}
	seen := sets.New[string]()
	for i, c := range a.Spec.CandidateNodes {
		errs = append(errs, validateReferenceName(c, candidates.Index(i), true)...)
		if seen.Has(c) {
			errs = append(errs, field.Duplicate(candidates.Index(i), c))
		}
		seen.Insert(c)
	}
	errs = append(errs, validateReferenceName(a.Spec.Node, spec.Child("node"), false)...)
	errs = append(errs, validateFreeText(a.Spec.Owner, spec.Child("owner"))...)
	if a.Spec.IronicName != "" && !IsIronicName(a.Spec.IronicName) {
		errs = append(errs, field.Invalid(spec.Child("ironicName"), a.Spec.IronicName,
			fmt.Sprintf("an Ironic name is 1 to %d of A-Z a-z 0-9 - . _ ~", MaxIronicName)))
	}
	return errs
}

// MaxIronicName is the longest name Ironic accepts.
const MaxIronicName = 255

// IsIronicName is Ironic's is_valid_logical_name (ironic/common/utils.py):
// 1 to 255 of RFC 3986's unreserved characters, A-Z a-z 0-9 - . _ ~.
func IsIronicName(s string) bool {
	if s == "" || len(s) > MaxIronicName {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("-._~", r):
		default:
			return false
		}
	}
	return true
}

// ValidateNewAllocation checks an Allocation being created.
func ValidateNewAllocation(a *nodusv1.Allocation) field.ErrorList {
	return append(ValidateAllocation(a), validateExtra(a.Spec.Extra, field.NewPath("spec", "extra"))...)
}

// ValidateAllocationUpdate forbids changing the request once made, as
// Ironic does. An extra stored before its bound stays until it changes.
func ValidateAllocationUpdate(a, old *nodusv1.Allocation) field.ErrorList {
	errs := ValidateAllocation(a)
	if !maps.Equal(a.Spec.Extra, old.Spec.Extra) {
		errs = append(errs, validateExtra(a.Spec.Extra, field.NewPath("spec", "extra"))...)
	}
	spec := field.NewPath("spec")
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(a.Spec.ResourceClass, old.Spec.ResourceClass, spec.Child("resourceClass"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(a.Spec.Traits, old.Spec.Traits, spec.Child("traits"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(a.Spec.CandidateNodes, old.Spec.CandidateNodes, spec.Child("candidateNodes"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(a.Spec.Node, old.Spec.Node, spec.Child("node"))...)
	return errs
}

// ValidateAllocationStatus checks the controller's outcome.
func ValidateAllocationStatus(a *nodusv1.Allocation) field.ErrorList {
	status := field.NewPath("status")
	var errs field.ErrorList
	switch a.Status.State {
	case "", nodusv1.AllocationStateAllocating, nodusv1.AllocationStateActive, nodusv1.AllocationStateError:
	default:
		errs = append(errs, field.NotSupported(status.Child("state"), a.Status.State,
			[]string{string(nodusv1.AllocationStateAllocating), string(nodusv1.AllocationStateActive), string(nodusv1.AllocationStateError)}))
	}
	if a.Status.State == nodusv1.AllocationStateActive && a.Status.Node == "" {
		errs = append(errs, field.Required(status.Child("node"), "an active allocation names its node"))
	}
	errs = append(errs, validateReferenceName(a.Status.Node, status.Child("node"), false)...)
	return errs
}

// MaxExtraBytes bounds a node's or an allocation's extra, its keys and
// values together: Ironic keeps extra in a TEXT column (64 KiB), and more
// would grow the object towards etcd's request limit, every write of the
// object (a claim, a status) carrying it.
const MaxExtraBytes = 64 << 10

func validateExtra(extra map[string]string, path *field.Path) field.ErrorList {
	size := 0
	for k, v := range extra {
		size += len(k) + len(v)
	}
	if size > MaxExtraBytes {
		return field.ErrorList{field.TooLong(path, "", MaxExtraBytes)}
	}
	return nil
}
