package integration

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestReplicasShareAnExternalEtcd runs two nodus-server replicas with
// --etcd-servers pointing at one etcd (not their own): a write through one is
// read and watched through the other.
func TestReplicasShareAnExternalEtcd(t *testing.T) {
	etcd, err := embeddedetcd.StartInsecure(t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Stop(ctx(t)) })
	external := func(o *server.Options) { o.EtcdServers = []string{etcd.ClientURL} }

	var replicas []*testserver.Server
	for i := 0; i < 2; i++ {
		s, err := testserver.Start(t.TempDir(), nil, external)
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		t.Cleanup(s.Stop)
		replicas = append(replicas, s)
	}
	a, b := replicas[0].Client.NodusV1(), replicas[1].Client.NodusV1()

	w, err := b.Pools().Watch(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := a.Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "shared"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, w, watch.Added, "shared")
	if _, err := b.Pools().Get(ctx(t), "shared", metav1.GetOptions{}); err != nil {
		t.Errorf("replica b does not see replica a's write: %v", err)
	}
}
