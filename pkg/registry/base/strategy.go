// Package base holds what every nodus.dev resource's registry shares: a
// strategy assembled from a kind's validation and status rules, the
// genericregistry.Store wiring, and table printing. Each kind's package under
// pkg/registry says only what is particular to that kind.
package base

import (
	"context"
	"reflect"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

// Rules is what a kind's package says about its objects.
type Rules struct {
	Namespaced bool
	// Validate checks a new object; ValidateUpdate an update (defaults to Validate).
	Validate       func(obj runtime.Object) field.ErrorList
	ValidateUpdate func(obj, old runtime.Object) field.ErrorList
	// PrepareForCreate clears what a client may not set on create (usually status).
	PrepareForCreate func(ctx context.Context, obj runtime.Object)
	// CopyStatus copies old's status into obj, so that updates of the main
	// resource never change status. Nil for kinds without status.
	CopyStatus func(obj, old runtime.Object)
	// PrepareForUpdate, after CopyStatus, sets what the server derives from
	// the change of a main-resource update.
	PrepareForUpdate func(obj, old runtime.Object)
	// CopySpec copies old's spec into obj, so that status updates never
	// change the spec. Nil for kinds without a status subresource.
	CopySpec func(obj, old runtime.Object)
	// ValidateStatus checks a status update.
	ValidateStatus func(obj, old runtime.Object) field.ErrorList
	// Warnings returns warnings for a create or update.
	Warnings func(obj runtime.Object) []string
	// ResetFields are the top-level fields the main resource does not own
	// (for server-side apply): "status" for kinds with a status subresource.
	ResetFields []string
	// StatusResetFields are the top-level fields the status subresource does not own.
	StatusResetFields []string
}

// Strategy implements the create, update and delete strategies of a kind.
type Strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	rules Rules
}

// NewStrategy builds the main resource's strategy from rules.
func NewStrategy(typer runtime.ObjectTyper, rules Rules) Strategy {
	return Strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, rules: rules}
}

func (s Strategy) NamespaceScoped() bool { return s.rules.Namespaced }

func (s Strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetGeneration(1)
	}
	if s.rules.PrepareForCreate != nil {
		s.rules.PrepareForCreate(ctx, obj)
	}
}

func (s Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	if s.rules.CopyStatus != nil {
		s.rules.CopyStatus(obj, old)
	}
	if s.rules.PrepareForUpdate != nil {
		s.rules.PrepareForUpdate(obj, old)
	}
	nextGeneration(obj, old)
}

// nextGeneration counts the changes of obj's spec in its generation, as
// Kubernetes does (tools compare it with what a controller observed): the
// library keeps the old one on every update, and a kind's strategy moves
// it. Objects stored before generations were kept start at 1.
func nextGeneration(obj, old runtime.Object) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	generation := max(m.GetGeneration(), 1)
	if !apiequality.Semantic.DeepEqual(specOf(obj), specOf(old)) {
		generation++
	}
	m.SetGeneration(generation)
}

// specOf is the Spec field of a Nodus object, nil for a kind without one
// (its generation stays 1).
func specOf(obj runtime.Object) interface{} {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	if spec := v.Elem().FieldByName("Spec"); spec.IsValid() {
		return spec.Interface()
	}
	return nil
}

// Validate and the ValidateUpdates check, beyond the kind's rules, every
// time the object holds (metadata.managedFields' too, which any writer
// sends): the store must be able to read back what it writes.
func (s Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return append(s.rules.Validate(obj), validation.ValidateTimes(obj)...)
}

func (s Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	if s.rules.ValidateUpdate != nil {
		return append(s.rules.ValidateUpdate(obj, old), validation.ValidateTimes(obj)...)
	}
	return s.Validate(context.Background(), obj)
}

func (s Strategy) WarningsOnCreate(_ context.Context, obj runtime.Object) []string {
	if s.rules.Warnings != nil {
		return s.rules.Warnings(obj)
	}
	return nil
}

func (s Strategy) WarningsOnUpdate(_ context.Context, obj, _ runtime.Object) []string {
	return s.WarningsOnCreate(context.Background(), obj)
}

func (Strategy) Canonicalize(runtime.Object)                   {}
func (Strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (Strategy) AllowUnconditionalUpdate(context.Context) bool { return true }
func (s Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields(s.rules.ResetFields)
}

// StatusStrategy is the strategy of a kind's status subresource.
type StatusStrategy struct{ Strategy }

// NewStatusStrategy builds the status subresource's strategy from rules.
func NewStatusStrategy(typer runtime.ObjectTyper, rules Rules) StatusStrategy {
	return StatusStrategy{NewStrategy(typer, rules)}
}

func (s StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	if s.rules.CopySpec != nil {
		s.rules.CopySpec(obj, old)
	}
}

func (s StatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	if s.rules.ValidateStatus != nil {
		return append(s.rules.ValidateStatus(obj, old), validation.ValidateTimes(obj)...)
	}
	return validation.ValidateTimes(obj)
}

func (s StatusStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func (s StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields(s.rules.StatusResetFields)
}

func resetFields(fields []string) map[fieldpath.APIVersion]*fieldpath.Set {
	set := fieldpath.NewSet()
	for _, f := range fields {
		set.Insert(fieldpath.MakePathOrDie(f))
	}
	return map[fieldpath.APIVersion]*fieldpath.Set{"nodus.dev/v1": set}
}
