package agentview

import (
	"context"
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodus-dev/nodus/pkg/auth"
)

// An agent's view keeps exactly what Shown selects, on top of what it
// selected; others' views are as asked.
func TestAnAgentSeesOnlyWhatTheViewShows(t *testing.T) {
	v := &REST{Shown: fields.OneTermNotEqualSelector("status.phase", "done")}
	agent := &user.DefaultInfo{Name: auth.NodeUserPrefix + "gpu-001", Groups: []string{auth.GroupNodes},
		Extra: map[string][]string{auth.ExtraAgentGeneration: {"1"}}}
	asked := &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.host", "host-abc")}
	view, narrowed := v.narrow(genericapirequest.WithUser(context.Background(), agent), asked)
	if !narrowed {
		t.Fatal("an agent's view was not narrowed")
	}
	if asked.FieldSelector.String() != "status.host=host-abc" {
		t.Fatalf("the caller's options changed: %s", asked.FieldSelector)
	}
	for _, c := range []struct {
		on   fields.Set
		sees bool
	}{
		{fields.Set{"status.host": "host-abc", "status.phase": "running"}, true},
		{fields.Set{"status.host": "host-abc", "status.phase": "done"}, false},
		{fields.Set{"status.host": "host-other", "status.phase": "running"}, false},
	} {
		if got := view.FieldSelector.Matches(c.on); got != c.sees {
			t.Errorf("%v: the agent sees it: %v, want %v", c.on, got, c.sees)
		}
	}
	member := &user.DefaultInfo{Name: "mary"}
	if got, narrowed := v.narrow(genericapirequest.WithUser(context.Background(), member), asked); got != asked || narrowed {
		t.Errorf("a member's view was narrowed: %s", got.FieldSelector)
	}
	if got, _ := v.narrow(genericapirequest.WithUser(context.Background(), agent), nil); got.FieldSelector.Matches(fields.Set{"status.phase": "done"}) {
		t.Errorf("an agent's list without options sees what Shown does not select")
	}
}

// A list reads the store's history when it names a past revision: those
// lists are checked against the present.
func TestAListReadsHistoryWhenItNamesAPastRevision(t *testing.T) {
	for _, c := range []struct {
		options *metainternalversion.ListOptions
		history bool
	}{
		{nil, false},
		{&metainternalversion.ListOptions{}, false},
		{&metainternalversion.ListOptions{ResourceVersion: "0"}, false},
		{&metainternalversion.ListOptions{ResourceVersion: "42", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, false},
		{&metainternalversion.ListOptions{ResourceVersion: "42"}, false},
		{&metainternalversion.ListOptions{ResourceVersion: "42", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, true},
		{&metainternalversion.ListOptions{Continue: "token"}, true},
		{&metainternalversion.ListOptions{ResourceVersion: "42", Limit: 10}, true},
		{&metainternalversion.ListOptions{ResourceVersion: "0", Limit: 10}, false},
	} {
		if got := readsHistory(c.options); got != c.history {
			t.Errorf("%+v: reads history %v, want %v", c.options, got, c.history)
		}
	}
}
