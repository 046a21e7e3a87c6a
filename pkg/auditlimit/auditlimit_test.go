package auditlimit

import (
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
)

// recorder is the backend the limit passes events to.
type recorder struct {
	audit.Backend
	got []*auditinternal.Event
}

func (r *recorder) ProcessEvents(events ...*auditinternal.Event) bool {
	r.got = append(r.got, events...)
	return true
}

func TestOnlyUnauthenticatedEventsPastTheBudgetAreLeftOut(t *testing.T) {
	r := &recorder{}
	b := New(r)
	failed := &auditinternal.Event{AuditID: "failed"}
	anonymous := &auditinternal.Event{AuditID: "anonymous", User: authnv1.UserInfo{Username: user.Anonymous}}
	tenant := &auditinternal.Event{AuditID: "tenant", User: authnv1.UserInfo{Username: "alice"}}
	var batch []*auditinternal.Event
	for i := 0; i < Burst; i++ {
		batch = append(batch, failed, anonymous)
	}
	batch = append(batch, tenant)
	sent := append([]*auditinternal.Event(nil), batch...)
	b.ProcessEvents(batch...)
	counts := map[string]int{}
	for _, e := range r.got {
		counts[string(e.AuditID)]++
	}
	if counts["failed"]+counts["anonymous"] > Burst+PerSecond || counts["tenant"] != 1 {
		t.Errorf("passed on %v of %d unauthenticated events and 1 tenant's, with a budget of %d", counts, 2*Burst, Burst)
	}
	if got := b.left.Load(); got != int64(2*Burst-counts["failed"]-counts["anonymous"]) {
		t.Errorf("counted %d left out, passed on %v", got, counts)
	}
	for i := range batch {
		if batch[i] != sent[i] {
			t.Fatal("the caller's events were changed")
		}
	}
	r.got = nil
	b.ProcessEvents(tenant, tenant)
	if len(r.got) != 2 {
		t.Errorf("a tenant's events past the budget of the unauthenticated: %d of 2 passed on", len(r.got))
	}
}
