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

const (
	electionPrefix = "/nodus/leader/controllers"
	sessionTTL     = 15 // seconds a dead leader keeps the lead
)

// Run campaigns until this replica leads, then runs lead with a context that
// ends when leadership is lost or ctx ends; then it campaigns again.
func Run(ctx context.Context, client *clientv3.Client, lead func(ctx context.Context)) {
	host, _ := os.Hostname()
	identity := host + "-" + uuid.NewString()[:8]
	for ctx.Err() == nil {
		session, err := concurrency.NewSession(client, concurrency.WithTTL(sessionTTL), concurrency.WithContext(ctx))
		if err != nil {
			klog.ErrorS(err, "leader election session")
			pause(ctx)
			continue
		}
		election := concurrency.NewElection(session, electionPrefix)
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
		resignCtx, done := context.WithTimeout(context.Background(), sessionTTL*time.Second)
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
