// Package project is the registry of Projects.
package project

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

var rules = base.Rules{
	Validate: func(obj runtime.Object) field.ErrorList { return validation.ValidateProject(obj.(*nodusv1.Project)) },
	// Every project is finalized: its contents go before the name is free again.
	PrepareForCreate: func(_ context.Context, obj runtime.Object) {
		p := obj.(*nodusv1.Project)
		p.Status = nodusv1.ProjectStatus{}
		if !slices.Contains(p.Finalizers, Finalizer) {
			p.Finalizers = append(p.Finalizers, Finalizer)
		}
	},
	CopyStatus: func(obj, old runtime.Object) { obj.(*nodusv1.Project).Status = old.(*nodusv1.Project).Status },
	// An SSH certificate lives up to an hour and a host checks only its
	// principal: when an update takes SSH access away from anyone, the
	// revision rises, and the project's active reservations raise their
	// epoch on it (pkg/lifecycle), so that no certificate issued before
	// opens a host. In the same write as the membership change: a revision
	// a controller derived later could be missed across a failover.
	//
	// The finalizer stays until the project is deleting: an update from a
	// manifest without it (kubectl replace) took it off, and a delete before
	// the controller put it back freed the name with the contents left.
	PrepareForUpdate: func(obj, old runtime.Object) {
		p, was := obj.(*nodusv1.Project), old.(*nodusv1.Project)
		if auth.LosesSSH(was.Spec.Members, p.Spec.Members) {
			p.Status.AccessRevision++
		}
		if was.DeletionTimestamp == nil && slices.Contains(was.Finalizers, Finalizer) && !slices.Contains(p.Finalizers, Finalizer) {
			p.Finalizers = append(p.Finalizers, Finalizer)
		}
	},
	ResetFields: []string{"status"},
}

var table = base.Table{Columns: []base.Column{
	base.Col("Display Name", "string", "Human-readable name.", func(p *nodusv1.Project) interface{} { return base.Str(p.Spec.DisplayName) }),
	base.Col("Members", "integer", "Number of member entries.", func(p *nodusv1.Project) interface{} { return int64(len(p.Spec.Members)) }),
}}
