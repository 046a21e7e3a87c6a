package validation

import (
	"fmt"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// ValidateHostLending checks an owner's view of how its host is lent. The
// scheduler and the lend actions write it, operators may; owners and the
// scheduler read it back (the pool a host was lent into outlives its node
// there), so nothing out of its domain is stored.
func ValidateHostLending(l *nodusv1.HostLending) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&l.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(errs, ValidateHostLendingStatus(&l.Status, field.NewPath("status"))...)
}

// ValidateHostLendingStatus checks a HostLending's status.
func ValidateHostLendingStatus(st *nodusv1.HostLendingStatus, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch st.State {
	case nodusv1.HostLendingLent, nodusv1.HostLendingWithdrawn, nodusv1.HostLendingEnded:
	case "":
		errs = append(errs, field.Required(path.Child("state"), "lent, withdrawn or ended"))
	default:
		errs = append(errs, field.NotSupported(path.Child("state"), st.State,
			[]string{string(nodusv1.HostLendingLent), string(nodusv1.HostLendingWithdrawn), string(nodusv1.HostLendingEnded)}))
	}
	errs = append(errs, validateReferenceName(st.Pool, path.Child("pool"), false)...)
	for _, b := range []struct {
		name     string
		v, limit int64
	}{
		{"epoch", st.Epoch, -1}, {"maxGPUs", int64(st.MaxGPUs), maxInventoryGPUs}, {"borrowedGPUs", int64(st.BorrowedGPUs), maxInventoryGPUs},
		{"maxExecutions", int64(st.MaxExecutions), -1}, {"executions", int64(st.Executions), -1},
		{"memoryMiB", st.MemoryMiB, maxInventoryMemoryMiB}, {"milliCPUs", st.MilliCPUs, maxInventoryCPUs * 1000},
	} {
		errs = append(errs, validateCount(b.v, b.limit, path.Child(b.name))...)
	}
	if len(st.GPUIndices) > maxInventoryGPUs {
		errs = append(errs, field.TooMany(path.Child("gpuIndices"), len(st.GPUIndices), maxInventoryGPUs))
	}
	seen := sets.New[int32]()
	for i, g := range st.GPUIndices {
		p := path.Child("gpuIndices").Index(i)
		switch {
		case g < 0 || g >= maxInventoryGPUs:
			errs = append(errs, field.Invalid(p, g, fmt.Sprintf("must be between 0 and %d", maxInventoryGPUs-1)))
		case seen.Has(g):
			errs = append(errs, field.Duplicate(p, g))
		}
		seen.Insert(g)
	}
	projects := sets.New[string]()
	for i, b := range st.Borrowers {
		p := path.Child("borrowers").Index(i)
		if b.Project == "" {
			errs = append(errs, field.Required(p.Child("project"), "the borrowing project"))
		} else {
			for _, msg := range apimachineryvalidation.ValidateNamespaceName(b.Project, false) {
				errs = append(errs, field.Invalid(p.Child("project"), b.Project, msg))
			}
			if projects.Has(b.Project) {
				errs = append(errs, field.Duplicate(p.Child("project"), b.Project))
			}
			projects.Insert(b.Project)
		}
		errs = append(errs, validateCount(int64(b.GPUs), maxInventoryGPUs, p.Child("gpus"))...)
		errs = append(errs, validateCount(int64(b.Executions), -1, p.Child("executions"))...)
	}
	return errs
}

// validateCount refuses a negative count, and one above limit unless limit is negative.
func validateCount(v, limit int64, path *field.Path) field.ErrorList {
	switch {
	case v < 0:
		return field.ErrorList{field.Invalid(path, v, "must not be negative")}
	case limit >= 0 && v > limit:
		return field.ErrorList{field.Invalid(path, v, fmt.Sprintf("must be at most %d", limit))}
	}
	return nil
}

// validatePoolLending checks a pool's lending policy.
func validatePoolLending(l *nodusv1.PoolLending, path *field.Path) field.ErrorList {
	if l == nil {
		return nil
	}
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, b := range l.Borrowers {
		p := path.Child("borrowers").Index(i)
		for _, msg := range apimachineryvalidation.ValidateNamespaceName(b.Project, false) {
			errs = append(errs, field.Invalid(p.Child("project"), b.Project, msg))
		}
		if seen.Has(b.Project) {
			errs = append(errs, field.Duplicate(p.Child("project"), b.Project))
		}
		seen.Insert(b.Project)
		if b.MaxGPUs < 0 || b.MaxGPUs > 1<<20 {
			errs = append(errs, field.Invalid(p.Child("maxGPUs"), b.MaxGPUs, "must not be negative"))
		}
		if b.MaxExecutions != nil && (*b.MaxExecutions < 0 || *b.MaxExecutions > 1<<20) {
			errs = append(errs, field.Invalid(p.Child("maxExecutions"), *b.MaxExecutions, "must be between 0 and 1048576; leave it out for no cap"))
		}
	}
	switch l.Network {
	case "", nodusv1.LendingNetworkNone, nodusv1.LendingNetworkEgress:
	default:
		errs = append(errs, field.NotSupported(path.Child("network"), l.Network,
			[]string{string(nodusv1.LendingNetworkNone), string(nodusv1.LendingNetworkEgress)}))
	}
	return errs
}
