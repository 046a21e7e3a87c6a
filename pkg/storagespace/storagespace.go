// Package storagespace tells operators how full etcd is before it refuses
// writes. At its quota etcd refuses every write that adds (507
// StorageFull); its own size figures are on the member's metrics port,
// which an embedded member keeps on loopback. So every server reads each
// member's status, publishes its database's size, what of it is in use and
// the quota on its own /metrics, and logs a warning while a member is past
// WarnAt of its quota.
package storagespace

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// WarnAt is the share of its quota past which a member's database is
// warned about: etcd measures the database file against the quota, and a
// member a fifth short of it still takes hours of a busy fleet's writes.
const WarnAt = 0.8

// DefaultRepeat is how often the warning is logged again while a member
// stays past WarnAt.
const DefaultRepeat = 10 * time.Minute

var (
	databaseBytes = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
		Name:           "nodus_etcd_database_bytes",
		Help:           "Size of an etcd member's database file, which etcd holds against its quota, by the member's client URL.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"endpoint"})
	inUseBytes = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
		Name:           "nodus_etcd_database_in_use_bytes",
		Help:           "What of an etcd member's database file is in use; defragmenting gives the rest back.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"endpoint"})
	quotaBytes = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
		Name:           "nodus_etcd_database_quota_bytes",
		Help:           "The database size at which an etcd member refuses writes (507 StorageFull); absent for members that do not report it (before etcd 3.6).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"endpoint"})
)

func init() { legacyregistry.MustRegister(databaseBytes, inUseBytes, quotaBytes) }

// Watcher reads the status of each of Endpoints through Client.
type Watcher struct {
	Client    clientv3.Maintenance
	Endpoints []string
	// Repeat is how often a warning is logged again while a member stays
	// past WarnAt; DefaultRepeat when zero.
	Repeat time.Duration

	now    func() time.Time
	warned map[string]time.Time // by endpoint, while past WarnAt
}

// Reading is what one check found of one member.
type Reading struct {
	Endpoint               string
	Database, InUse, Quota int64
	Past, Warned, Relieved bool
}

// Run checks at once and then every interval until ctx ends, when it
// takes its members' figures off /metrics.
func (w *Watcher) Run(ctx context.Context, interval time.Duration) {
	defer func() {
		for _, endpoint := range w.Endpoints {
			for _, g := range []*compbasemetrics.GaugeVec{databaseBytes, inUseBytes, quotaBytes} {
				g.DeleteLabelValues(endpoint)
			}
		}
	}()
	for {
		w.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// Check reads each member's status once, publishes it and logs what
// changed: a member past WarnAt (again every Repeat while it stays), and
// one back under it. A member that does not answer keeps its last figures.
func (w *Watcher) Check(ctx context.Context) []Reading {
	if w.warned == nil {
		w.warned = map[string]time.Time{}
	}
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	repeat := w.Repeat
	if repeat == 0 {
		repeat = DefaultRepeat
	}
	var readings []Reading
	for _, endpoint := range w.Endpoints {
		statusCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		status, err := w.Client.Status(statusCtx, endpoint)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				klog.V(2).InfoS("reading etcd's database size", "endpoint", endpoint, "err", err)
			}
			continue
		}
		r := Reading{Endpoint: endpoint, Database: status.DbSize, InUse: status.DbSizeInUse, Quota: status.DbSizeQuota}
		databaseBytes.WithLabelValues(endpoint).Set(float64(r.Database))
		inUseBytes.WithLabelValues(endpoint).Set(float64(r.InUse))
		if r.Quota > 0 {
			quotaBytes.WithLabelValues(endpoint).Set(float64(r.Quota))
		}
		r.Past = r.Quota > 0 && float64(r.Database) >= WarnAt*float64(r.Quota)
		last, warned := w.warned[endpoint]
		switch {
		case r.Past && (!warned || now().Sub(last) >= repeat):
			w.warned[endpoint] = now()
			r.Warned = true
			// At error severity, which alerting on the log catches.
			klog.ErrorS(nil, "etcd's database is close to its quota: at the quota every write that adds is refused (507 StorageFull); delete what is no longer needed, or raise the quota (docs/errors/StorageFull.md)",
				"endpoint", endpoint, "databaseBytes", r.Database, "inUseBytes", r.InUse, "quotaBytes", r.Quota)
		case !r.Past && warned:
			delete(w.warned, endpoint)
			r.Relieved = true
			klog.InfoS("etcd's database is back under its warning line", "endpoint", endpoint,
				"databaseBytes", r.Database, "quotaBytes", r.Quota, "warnAt", WarnAt)
		}
		readings = append(readings, r)
	}
	return readings
}
