package integration

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"

	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestANamespacesWatchListEndsItsInitialEvents: client-go's informers may
// list by watching (sendInitialEvents), and wait for the bookmark whose
// k8s.io/initial-events-end annotation says the initial events are over.
// The namespaces a member watches are its projects made namespaces: the
// bookmark must keep that annotation, or the member's informer never
// syncs; and the initial events are its projects only.
func TestANamespacesWatchListEndsItsInitialEvents(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	client := kubernetes.NewForConfigOrDie(f.member)
	sendInitialEvents := true
	w, err := client.CoreV1().Namespaces().Watch(ctx(t), metav1.ListOptions{SendInitialEvents: &sendInitialEvents,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var initial []string
	timeout := time.After(15 * time.Second)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch closed after %v, before the initial events ended", initial)
			}
			ns, isNamespace := e.Object.(*corev1.Namespace)
			if !isNamespace {
				t.Fatalf("a %s event of %T: %+v", e.Type, e.Object, e.Object)
			}
			switch e.Type {
			case watch.Added:
				initial = append(initial, ns.Name)
			case watch.Bookmark:
				if ns.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
					continue
				}
				if len(initial) != 1 || initial[0] != "acme" {
					t.Errorf("mary's initial namespaces: %v, want [acme]", initial)
				}
				return
			}
		case <-timeout:
			t.Fatalf("no bookmark ended the initial events (%v) within 15 s", initial)
		}
	}
}

// TestAMemberRemovedSeesItsNamespaceDeleted: a member's namespaces are its
// projects; removed from one while it keeps another (so its watch stays
// authorized), its watch says DELETED (kubectl get ns -w, an informer's
// cache), also a watch that starts from a list made before the removal;
// added again, ADDED. A change to a project it never belonged to reaches it
// in no form: not even the name.
func TestAMemberRemovedSeesItsNamespaceDeleted(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	projects := s.Client.NodusV1().Projects()
	members := func(project string, change func([]nodusv1.ProjectMember) []nodusv1.ProjectMember) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := projects.Get(ctx(t), project, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.Members = change(p.Spec.Members)
			_, err = projects.Update(ctx(t), p, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := projects.Create(ctx(t), &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "secret-plans"},
		Spec: nodusv1.ProjectSpec{Members: []nodusv1.ProjectMember{{Name: "oscar", Role: nodusv1.ProjectRoleAdmin}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mary := nodusv1.ProjectMember{Name: "mary", Role: nodusv1.ProjectRoleViewer}
	members("other", func(m []nodusv1.ProjectMember) []nodusv1.ProjectMember { return append(m, mary) })

	client := kubernetes.NewForConfigOrDie(tokenFor(t, s, "mary"))
	list, err := client.CoreV1().Namespaces().List(ctx(t), metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("mary's namespaces: %v %+v", err, list)
	}
	watchFrom := func() watch.Interface {
		w, err := client.CoreV1().Namespaces().Watch(ctx(t), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	next := func(w watch.Interface, want watch.EventType) {
		t.Helper()
		select {
		case e := <-w.ResultChan():
			ns, ok := e.Object.(*corev1.Namespace)
			if !ok || e.Type != want || ns.Name != "acme" {
				t.Fatalf("got a %s event of %+v, want %s of namespace acme", e.Type, e.Object, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("no %s event of acme within 15 s", want)
		}
	}
	w := watchFrom()
	members("secret-plans", func(m []nodusv1.ProjectMember) []nodusv1.ProjectMember {
		return append(m, nodusv1.ProjectMember{Name: "someone", Role: nodusv1.ProjectRoleViewer})
	})
	members("acme", func(m []nodusv1.ProjectMember) []nodusv1.ProjectMember {
		return slices.DeleteFunc(m, func(p nodusv1.ProjectMember) bool { return p.Name == "mary" })
	})
	next(w, watch.Deleted)
	// From the same list: the removal happened after it.
	replayed := watchFrom()
	next(replayed, watch.Deleted)
	members("acme", func(m []nodusv1.ProjectMember) []nodusv1.ProjectMember { return append(m, mary) })
	next(w, watch.Added)
	next(replayed, watch.Added)
	select {
	case e := <-w.ResultChan():
		t.Errorf("an event mary should not see: %s %+v", e.Type, e.Object)
	case <-time.After(time.Second):
	}
}

// TestNamespacesAreSelectedByTheirNameLabel selects namespaces by the
// kubernetes.io/metadata.name label each of them shows, as `kubectl get ns
// -l` and network policies' namespace selectors do: the selector went to
// the projects' own labels, and matched none. A project's own label of that
// key does not replace the name.
func TestNamespacesAreSelectedByTheirNameLabel(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	if _, err := s.Client.NodusV1().Projects().Create(ctx(t), &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "pretender",
		Labels: map[string]string{corev1.LabelMetadataName: "acme", "tier": "gold"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(s.Config)
	names := func(selector string) []string {
		t.Helper()
		list, err := client.CoreV1().Namespaces().List(ctx(t), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatalf("%s: %v", selector, err)
		}
		var out []string
		for _, ns := range list.Items {
			if ns.Labels[corev1.LabelMetadataName] != ns.Name {
				t.Errorf("namespace %s is labelled %q", ns.Name, ns.Labels[corev1.LabelMetadataName])
			}
			out = append(out, ns.Name)
		}
		slices.Sort(out)
		return out
	}
	for selector, want := range map[string][]string{
		corev1.LabelMetadataName + "=acme":                {"acme"},
		corev1.LabelMetadataName + " in (acme,other)":     {"acme", "other"},
		corev1.LabelMetadataName + "=pretender,tier=gold": {"pretender"},
		corev1.LabelMetadataName + "=acme,tier=gold":      nil,
	} {
		if got := names(selector); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", selector, got, want)
		}
	}
	w, err := client.CoreV1().Namespaces().Watch(ctx(t), metav1.ListOptions{LabelSelector: corev1.LabelMetadataName + "=other"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case e := <-w.ResultChan():
		if ns, ok := e.Object.(*corev1.Namespace); !ok || ns.Name != "other" || e.Type != watch.Added {
			t.Errorf("the selected watch's first event: %s %+v", e.Type, e.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the selected watch showed nothing")
	}
}

// TestAMissingNamespaceIsANamespace: `kubectl get namespace missing`
// answered `projects.nodus.dev "missing" not found`, the projection's
// source, where kubectl and client-go expect the resource asked for.
func TestAMissingNamespaceIsANamespace(t *testing.T) {
	s := testserver.StartTestServer(t)
	_, err := kubernetes.NewForConfigOrDie(s.Config).CoreV1().Namespaces().Get(ctx(t), "missing", metav1.GetOptions{})
	status, ok := err.(apierrors.APIStatus)
	if !apierrors.IsNotFound(err) || !ok || status.Status().Details == nil || status.Status().Details.Kind != "namespaces" ||
		status.Status().Details.Group != "" || status.Status().Message != `namespaces "missing" not found` {
		t.Errorf("a namespace that does not exist: %v %+v", err, status)
	}
}

// TestNamespacesAreSelectedByTheirPhase: `kubectl get ns --field-selector
// status.phase=Active` went to the projects' store, which has no such
// field, and was refused 400. A project being deleted shows a Terminating
// namespace, and leaves a watch of the Active ones as DELETED.
func TestNamespacesAreSelectedByTheirPhase(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	const hold = "test.nodus.dev/hold"
	if _, err := s.Client.NodusV1().Projects().Create(ctx(t), &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "leaving",
		Finalizers: []string{hold}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := s.Client.NodusV1().Projects().Get(ctx(t), "leaving", metav1.GetOptions{})
			if err != nil {
				return nil
			}
			p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == hold })
			_, err = s.Client.NodusV1().Projects().Update(ctx(t), p, metav1.UpdateOptions{})
			return err
		})
	})
	client := kubernetes.NewForConfigOrDie(s.Config)
	names := func(selector string) []string {
		t.Helper()
		list, err := client.CoreV1().Namespaces().List(ctx(t), metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			t.Fatalf("%s: %v", selector, err)
		}
		var out []string
		for _, ns := range list.Items {
			out = append(out, ns.Name+"/"+string(ns.Status.Phase))
		}
		slices.Sort(out)
		return out
	}
	w, err := client.CoreV1().Namespaces().Watch(ctx(t), metav1.ListOptions{FieldSelector: "status.phase=Active"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := s.Client.NodusV1().Projects().Delete(ctx(t), "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for selector, want := range map[string][]string{
		"status.phase=Active":                         {"acme/Active", "other/Active"},
		"status.phase==Terminating":                   {"leaving/Terminating"},
		"status.phase!=Active":                        {"leaving/Terminating"},
		"metadata.name=acme,status.phase=Active":      {"acme/Active"},
		"metadata.name=acme,status.phase=Terminating": nil,
	} {
		if got := names(selector); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", selector, got, want)
		}
	}
	if _, err := client.CoreV1().Namespaces().List(ctx(t), metav1.ListOptions{FieldSelector: "status.bogus=x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("a field namespaces do not have: %v, want 400", err)
	}
	events := map[string]watch.EventType{}
	timeout := time.After(30 * time.Second)
	for events["leaving"] != watch.Deleted {
		select {
		case e := <-w.ResultChan():
			ns, ok := e.Object.(*corev1.Namespace)
			if !ok {
				t.Fatalf("a %s event of %T", e.Type, e.Object)
			}
			if e.Type != watch.Deleted && ns.Status.Phase != corev1.NamespaceActive {
				t.Errorf("the watch of Active namespaces showed %s %s", e.Type, ns.Name+"/"+string(ns.Status.Phase))
			}
			events[ns.Name] = e.Type
		case <-timeout:
			t.Fatalf("the deleted project did not leave the watch of Active namespaces: %v", events)
		}
	}
}
