// Package leader elects one nodus-server replica to run the controllers,
// with etcd's election recipe on the shared etcd.
package leader

import (
	"context"
	"os"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/klog/v2"
)

// ElectionPrefix is where the replicas campaign in etcd.
const ElectionPrefix = "/nodus/leader/controllers"

// DefaultLease is how long a leader that died without a word (kill -9, a
// partition) keeps the lead before another replica takes over.
const DefaultLease = 5 * time.Second

// Run campaigns until this replica leads, then runs lead with a context that
// ends when leadership is lost or ctx ends; then it campaigns again. The
// lead is an etcd lease of lease (whole seconds, at least one), kept alive
// every third of it.
func Run(ctx context.Context, client *clientv3.Client, lease time.Duration, lead func(ctx context.Context)) {
	sessionTTL := max(1, int(lease.Round(time.Second)/time.Second))
	host, _ := os.Hostname()
	identity := host + "-" + uuid.NewString()[:8]
	for ctx.Err() == nil {
		session, err := concurrency.NewSession(client, concurrency.WithTTL(sessionTTL), concurrency.WithContext(ctx))
		if err != nil {
			klog.ErrorS(err, "leader election session")
			pause(ctx)
			continue
		}
		election := concurrency.NewElection(session, ElectionPrefix)
		if err := election.Campaign(ctx, identity); err != nil {
			session.Close()
			pause(ctx)
			continue
		}
		klog.InfoS("leading the controllers", "identity", identity)
		leadCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-session.Done():
			case <-leadCtx.Done():
			}
			cancel()
		}()
		lead(leadCtx)
		cancel()
		resignCtx, done := context.WithTimeout(context.Background(), time.Duration(sessionTTL)*time.Second)
		_ = election.Resign(resignCtx)
		done()
		session.Close()
	}
}

func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}
