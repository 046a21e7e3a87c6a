package main

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/generated/informers/externalversions"
	"github.com/nodus-dev/nodus/pkg/lending"
)

// watchesPerAgent is how many watches nodusd holds: the reservations on its
// node, its Node, and the executions placed on its host (pkg/agent).
const watchesPerAgent = 3

// agentWatches are the agents' watches, each a client-go informer on its
// agent's own connection, as nodusd holds them.
type agentWatches struct {
	cancel    context.CancelFunc
	mu        sync.Mutex
	factories []externalversions.SharedInformerFactory
}

// openAgentWatches opens nodusd's watches for every agent, conc agents at a
// time, and returns once each has listed what it selects and is watching.
// Node i is fleetName(i); its host's alias is read from its UID, as the
// agent reads it from its Node.
func openAgentWatches(ctx context.Context, s *server, agents []agent, conc int) (*agentWatches, error) {
	nodes, err := s.client.NodusV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	uids := make(map[string]types.UID, len(nodes.Items))
	for _, n := range nodes.Items {
		uids[n.Name] = n.UID
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &agentWatches{cancel: cancel}
	err = parallel(len(agents), conc, func(i int) error {
		name := fleetName(i)
		uid, ok := uids[name]
		if !ok {
			return fmt.Errorf("node %s is not listed", name)
		}
		alias := lending.HostAlias(&nodusv1.Node{ObjectMeta: metav1.ObjectMeta{UID: uid}})
		client := agents[i].client
		reservations := selecting(client, "status.node="+name)
		reservations.Nodus().V1().Reservations().Informer()
		node := selecting(client, "metadata.name="+name)
		node.Nodus().V1().Nodes().Informer()
		executions := selecting(client, "status.host="+alias)
		executions.Nodus().V1().Executions().Informer()
		factories := []externalversions.SharedInformerFactory{reservations, node, executions}
		w.mu.Lock()
		w.factories = append(w.factories, factories...)
		w.mu.Unlock()
		for _, f := range factories {
			f.Start(ctx.Done())
		}
		for _, f := range factories {
			for kind, synced := range f.WaitForCacheSync(ctx.Done()) {
				if !synced {
					return fmt.Errorf("agent of %s: its watch of %v did not start", name, kind)
				}
			}
		}
		return nil
	})
	if err != nil {
		w.stop()
		return nil, err
	}
	return w, nil
}

// selecting is an informer factory of client whose lists and watches
// select by field, as nodusd's. Without a resync: nodusd's executions
// informer has one (30 s), but a resync replays the informer's own cache
// and sends the server nothing.
func selecting(client versioned.Interface, fieldSelector string) externalversions.SharedInformerFactory {
	return externalversions.NewSharedInformerFactoryWithOptions(client, 0,
		externalversions.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = fieldSelector }))
}

// stop closes every watch and waits for the informers to end.
func (w *agentWatches) stop() {
	w.cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range w.factories {
		f.Shutdown()
	}
}

// count is how many watches are open.
func (w *agentWatches) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.factories)
}
