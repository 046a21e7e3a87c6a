// Package auditlimit keeps requests that no one authenticated from filling
// the audit log. Anyone who reaches the server's port can send them, and
// the policy records a failed authentication of a release or a lend at
// length: a flood of them rotated the log (--audit-log-maxsize,
// --audit-log-maxbackup) until the record of what tenants did was gone.
// Past a budget such events are counted instead of written, and the count
// is logged, and published, once a minute.
package auditlimit

import (
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// The budget of unauthenticated requests' events written to the audit
// log: five a second, bursts of a hundred. A person with an expired token
// makes a few; what is past the budget is a flood, which the server log's
// count and the metric still show.
const (
	PerSecond = 5
	Burst     = 100
)

// reportEvery is how often the events left out are told.
const reportEvery = time.Minute

var unwritten = compbasemetrics.NewCounter(&compbasemetrics.CounterOpts{
	Name:           "nodus_audit_unauthenticated_events_unwritten_total",
	Help:           "Audit events of unauthenticated requests (failed authentication, anonymous) left out of the audit backends past their budget.",
	StabilityLevel: compbasemetrics.ALPHA,
})

func init() { legacyregistry.MustRegister(unwritten) }

// Backend is an audit backend that passes unauthenticated requests' events
// on within a budget, and every other event as it comes.
type Backend struct {
	audit.Backend
	budget *rate.Limiter
	left   atomic.Int64
}

// New wraps backend with the budget.
func New(backend audit.Backend) *Backend {
	return &Backend{Backend: backend, budget: rate.NewLimiter(PerSecond, Burst)}
}

// ProcessEvents passes events on, less the unauthenticated ones past the
// budget.
func (b *Backend) ProcessEvents(events ...*auditinternal.Event) bool {
	kept := events
	for i, e := range events {
		if !unauthenticated(e) || b.budget.Allow() {
			if len(kept) < len(events) {
				kept = append(kept, e)
			}
			continue
		}
		if len(kept) == len(events) {
			// The first left out: the caller's slice stays as it was.
			kept = append(make([]*auditinternal.Event, 0, len(events)), events[:i]...)
		}
		b.left.Add(1)
		unwritten.Inc()
	}
	if len(kept) == 0 {
		return true
	}
	return b.Backend.ProcessEvents(kept...)
}

// Run runs the wrapped backend, and tells what was left out until stopCh
// closes.
func (b *Backend) Run(stopCh <-chan struct{}) error {
	go func() {
		t := time.NewTicker(reportEvery)
		defer t.Stop()
		for {
			select {
			case <-stopCh:
				b.report()
				return
			case <-t.C:
				b.report()
			}
		}
	}()
	return b.Backend.Run(stopCh)
}

func (b *Backend) report() {
	if n := b.left.Swap(0); n > 0 {
		klog.InfoS("WARNING: audit events of unauthenticated requests were left out past their budget (a flood?)",
			"left", n, "budgetPerSecond", PerSecond, "burst", Burst, "metric", "nodus_audit_unauthenticated_events_unwritten_total")
	}
}

// unauthenticated says whether e is of a request no credential
// authenticated: one that failed (the library audits it with no user,
// answered 401), or one let through as anonymous to a public path (a
// write there is refused 403, and audited as such).
func unauthenticated(e *auditinternal.Event) bool {
	return e.User.Username == "" || e.User.Username == user.Anonymous
}
