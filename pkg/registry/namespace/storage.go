// Package namespace serves /api/v1/namespaces as a read-only projection of
// Projects, so that kubectl's namespace look-ups and `kubectl get namespaces`
// work. Non-operators see only the projects they belong to.
package namespace

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
	"github.com/nodus-dev/nodus/pkg/registry/base"
	"github.com/nodus-dev/nodus/pkg/watchfilter"
)

// REST is the namespaces storage.
type REST struct {
	projects *genericregistry.Store
}

// NewREST projects the Projects in projects.
func NewREST(projects *genericregistry.Store) *REST { return &REST{projects: projects} }

var (
	_ rest.Getter               = &REST{}
	_ rest.Lister               = &REST{}
	_ rest.Watcher              = &REST{}
	_ rest.Scoper               = &REST{}
	_ rest.SingularNameProvider = &REST{}
	_ rest.ShortNamesProvider   = &REST{}
)

func (r *REST) New() runtime.Object     { return &corev1.Namespace{} }
func (r *REST) NewList() runtime.Object { return &corev1.NamespaceList{} }
func (r *REST) Destroy()                {}
func (r *REST) NamespaceScoped() bool   { return false }
func (r *REST) GetSingularName() string { return "namespace" }
func (r *REST) ShortNames() []string    { return []string{"ns"} }

func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	if len(apimachineryvalidation.ValidateNamespaceName(name, false)) > 0 {
		// No project can have this name.
		return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	obj, err := r.projects.Get(ctx, name, options)
	if apierrors.IsNotFound(err) {
		// Of the resource asked for: `namespaces "x" not found`, as
		// kubectl and client-go expect of this path, not the project's.
		return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	if err != nil {
		return nil, err
	}
	return toNamespace(obj.(*nodusv1.Project)), nil
}

// List pages through all projects only for operators. For everyone else a
// page of all projects would tell what it filtered away: a continue token
// names the last project read, remainingItemCount counts the rest, and an
// empty page that goes on shows that there are more. So their list is one
// page of the projects they see, whatever limit or continue they send.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	visible, all := visibleTo(ctx)
	if !all && options != nil {
		options = options.DeepCopy()
		options.Limit, options.Continue = 0, ""
	}
	options, named := byNameLabel(options)
	options, phased := byPhase(options)
	visible = both(both(visible, named), phased)
	obj, err := r.projects.List(ctx, options)
	if err != nil {
		return nil, err
	}
	projects := obj.(*nodusv1.ProjectList)
	list := &corev1.NamespaceList{ListMeta: projects.ListMeta}
	if !all {
		list.ListMeta = metav1.ListMeta{ResourceVersion: projects.ResourceVersion}
	}
	if named != nil || phased != nil {
		list.RemainingItemCount = nil // it counted projects of every name and phase
	}
	for i := range projects.Items {
		if visible(&projects.Items[i]) {
			list.Items = append(list.Items, *toNamespace(&projects.Items[i]))
		}
	}
	return list, nil
}

// Watch projects the projects' watch. For a non-operator it keeps which
// namespaces it has shown the watcher: a project it is removed from is
// then DELETED (and one it is added to ADDED), as the namespace left (or
// entered) its list; a project it was never shown passes in no form, not
// even its name.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	visible, all := visibleTo(ctx)
	options, named := byNameLabel(options)
	options, phased := byPhase(options)
	if named != nil || phased != nil {
		// An event of a namespace the selection does not match is of none
		// this watch shows, in any form; one whose phase leaves the
		// selection (its deletion began) is DELETED from it.
		visible, all = both(both(visible, named), phased), false
	}
	shown := map[string]bool{}
	if !all {
		var err error
		if shown, err = r.shownAtStart(ctx, options, visible); err != nil {
			return nil, err
		}
	}
	w, err := r.projects.Watch(ctx, options)
	if err != nil {
		return nil, err
	}
	return watchfilter.Filter(w, func(in watch.Event) (watch.Event, bool) {
		p, ok := projectOf(in.Object)
		if !ok {
			// An error passes; nothing else but projects may.
			return in, in.Type == watch.Error
		}
		if in.Type == watch.Bookmark {
			// A bookmark is a resourceVersion and its annotations, among
			// them the end of a watch-list's initial events, which the
			// client's informer waits for.
			return watch.Event{Type: watch.Bookmark, Object: &corev1.Namespace{TypeMeta: namespaceType,
				ObjectMeta: metav1.ObjectMeta{ResourceVersion: p.ResourceVersion, Annotations: p.Annotations}}}, true
		}
		if all {
			return watch.Event{Type: in.Type, Object: toNamespace(p)}, true
		}
		was := shown[p.Name]
		switch {
		case in.Type == watch.Deleted:
			delete(shown, p.Name)
			return watch.Event{Type: watch.Deleted, Object: toNamespace(p)}, was
		case visible(p):
			shown[p.Name] = true
			if !was {
				return watch.Event{Type: watch.Added, Object: toNamespace(p)}, true
			}
			return watch.Event{Type: in.Type, Object: toNamespace(p)}, true
		case was:
			delete(shown, p.Name)
			return watch.Event{Type: watch.Deleted, Object: toNamespace(p)}, true
		}
		return in, false
	}), nil
}

// shownAtStart is what the watcher was shown before its watch starts: its
// namespaces at the resourceVersion the watch starts from (read from etcd,
// as of then), or none when the watch itself starts with them.
func (r *REST) shownAtStart(ctx context.Context, options *metainternalversion.ListOptions, visible func(*nodusv1.Project) bool) (map[string]bool, error) {
	shown := map[string]bool{}
	if options == nil || options.ResourceVersion == "" || options.ResourceVersion == "0" ||
		(options.SendInitialEvents != nil && *options.SendInitialEvents) {
		return shown, nil
	}
	obj, err := r.projects.List(ctx, &metainternalversion.ListOptions{ResourceVersion: options.ResourceVersion,
		ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		return nil, err
	}
	list := obj.(*nodusv1.ProjectList)
	for i := range list.Items {
		if visible(&list.Items[i]) {
			shown[list.Items[i].Name] = true
		}
	}
	return shown, nil
}

// projectOf is the project an event carries, also inside the watch
// cache's wrapper that shares its serializations between watchers.
func projectOf(obj runtime.Object) (*nodusv1.Project, bool) {
	if cached, ok := obj.(runtime.CacheableObject); ok {
		obj = cached.GetObject()
	}
	p, ok := obj.(*nodusv1.Project)
	return p, ok
}

func (r *REST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return table.ConvertToTable(ctx, object, tableOptions)
}

var table = base.Table{Columns: []base.Column{
	base.Col("Status", "string", "Phase of the namespace.", func(n *corev1.Namespace) interface{} { return string(n.Status.Phase) }),
}}

// visibleTo returns whether the caller of ctx may see a project, and
// whether it sees them all.
func visibleTo(ctx context.Context) (func(*nodusv1.Project) bool, bool) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return func(*nodusv1.Project) bool { return false }, false
	}
	if auth.IsOperator(u) {
		return func(*nodusv1.Project) bool { return true }, true
	}
	return func(p *nodusv1.Project) bool {
		_, member := auth.RoleIn(p, u)
		return member
	}, false
}

var namespaceType = metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}

// nameLabel is the label every namespace has, its name, set by the
// server (a project's own label of that key does not replace it).
const nameLabel = corev1.LabelMetadataName

func toNamespace(p *nodusv1.Project) *corev1.Namespace {
	labels := map[string]string{}
	for k, v := range p.Labels {
		labels[k] = v
	}
	labels[nameLabel] = p.Name
	ns := &corev1.Namespace{
		TypeMeta: namespaceType,
		ObjectMeta: metav1.ObjectMeta{
			Name:              p.Name,
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp,
			DeletionTimestamp: p.DeletionTimestamp,
			Labels:            labels,
		},
		Status: corev1.NamespaceStatus{Phase: phaseOf(p)},
	}
	if p.Spec.DisplayName != "" {
		ns.Annotations = map[string]string{"nodus.dev/display-name": p.Spec.DisplayName}
	}
	return ns
}

func phaseOf(p *nodusv1.Project) corev1.NamespacePhase {
	if p.DeletionTimestamp != nil {
		return corev1.NamespaceTerminating
	}
	return corev1.NamespaceActive
}

// PhaseField is the field selector of a namespace's phase, as
// kube-apiserver offers it (`kubectl get ns --field-selector
// status.phase=Active`).
const PhaseField = "status.phase"

// byPhase takes the requirements on PhaseField out of options' field
// selector, which the projects' store does not know (a project has no
// phase: its namespace has), and returns them as a test of the phase a
// project's namespace shows; nil when there are none.
func byPhase(options *metainternalversion.ListOptions) (*metainternalversion.ListOptions, func(*nodusv1.Project) bool) {
	if options == nil || options.FieldSelector == nil {
		return options, nil
	}
	var rest, phases []fields.Selector
	for _, req := range options.FieldSelector.Requirements() {
		term := fields.OneTermEqualSelector(req.Field, req.Value)
		if req.Operator == selection.NotEquals {
			term = fields.OneTermNotEqualSelector(req.Field, req.Value)
		}
		if req.Field == PhaseField {
			phases = append(phases, term)
		} else {
			rest = append(rest, term)
		}
	}
	if len(phases) == 0 {
		return options, nil
	}
	options = options.DeepCopy()
	options.FieldSelector = fields.AndSelectors(rest...)
	selected := fields.AndSelectors(phases...)
	return options, func(p *nodusv1.Project) bool {
		return selected.Matches(fields.Set{PhaseField: string(phaseOf(p))})
	}
}

// byNameLabel takes the requirements on nameLabel out of options' label
// selector, which the projects' store would match against the projects' own
// labels, and returns them as a test of a project's name; nil when there
// are none.
func byNameLabel(options *metainternalversion.ListOptions) (*metainternalversion.ListOptions, func(*nodusv1.Project) bool) {
	if options == nil || options.LabelSelector == nil {
		return options, nil
	}
	requirements, selectable := options.LabelSelector.Requirements()
	if !selectable {
		return options, nil
	}
	rest, names := labels.NewSelector(), labels.NewSelector()
	for _, req := range requirements {
		if req.Key() == nameLabel {
			names = names.Add(req)
		} else {
			rest = rest.Add(req)
		}
	}
	if names.Empty() {
		return options, nil
	}
	options = options.DeepCopy()
	options.LabelSelector = rest
	return options, func(p *nodusv1.Project) bool { return names.Matches(labels.Set{nameLabel: p.Name}) }
}

// both is visible narrowed by also, when there is one.
func both(visible, also func(*nodusv1.Project) bool) func(*nodusv1.Project) bool {
	if also == nil {
		return visible
	}
	return func(p *nodusv1.Project) bool { return visible(p) && also(p) }
}
