package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAFullStoreRefusesWritesAsStorageFullAndTakesThemAgain fills the
// embedded etcd's quota with the versions of one Pool's annotation: every
// write after is refused 507 StorageFull (the library answered etcd's
// NOSPACE as a 500 InternalError), reads and deletes pass, and the server
// takes writes again by itself once compaction has made room (etcd keeps
// its alarm, refusing every write, until someone disarms it).
func TestAFullStoreRefusesWritesAsStorageFullAndTakesThemAgain(t *testing.T) {
	testserver.KeepLogs(t)
	s, err := testserver.Start(t.TempDir(), nil, func(o *server.Options) { o.EmbeddedEtcdQuotaBytes = 32 << 20 })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	pools := s.Client.NodusV1().Pools()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{"big", "spare"} {
		if _, err := pools.Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	filler := strings.Repeat("x", 200<<10)
	// Each write stores a value of its own: one equal to the stored would
	// pass without reaching etcd.
	written := 0
	write := func(cx context.Context) error {
		written++
		p, err := pools.Get(cx, "big", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Annotations = map[string]string{"filler": fmt.Sprint(written, filler)}
		_, err = pools.Update(cx, p, metav1.UpdateOptions{})
		return err
	}
	var refused error
	for range 1000 {
		if refused = write(ctx); refused != nil {
			break
		}
	}
	status, ok := refused.(apierrors.APIStatus)
	if !ok || status.Status().Code != http.StatusInsufficientStorage || status.Status().Reason != apierror.ReasonStorageFull {
		t.Fatalf("the write past a 32 MiB quota: %v; want 507 %s", refused, apierror.ReasonStorageFull)
	}
	// The next write is refused too; reads and deletes pass.
	if err := write(ctx); err == nil {
		t.Fatal("a write passed right after one was refused for the quota")
	}
	if _, err := pools.Get(ctx, "big", metav1.GetOptions{}); err != nil {
		t.Fatalf("a read of a full store: %v", err)
	}
	if err := pools.Delete(ctx, "spare", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("a delete in a full store: %v", err)
	}
	// The old versions are history compaction frees: writes come back
	// without anyone's help.
	if err := testfleet.Eventually(ctx, time.Minute, func(cx context.Context) (bool, error) {
		return write(cx) == nil, nil
	}); err != nil {
		last, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t.Fatalf("writes were still refused a minute after the store was full: %v", write(last))
	}
	// Every server publishes how full etcd is, an embedded member too,
	// whose own figures are on a loopback port no operator reaches.
	// (Whether they cross the warning line before the store is full is
	// pkg/storagespace's test: here the member takes writes again within
	// the publishing interval.)
	if err := testfleet.Eventually(ctx, 30*time.Second, func(context.Context) (bool, error) {
		quota, _ := metricFloat(t, s, "nodus_etcd_database_quota_bytes{")
		database, _ := metricFloat(t, s, "nodus_etcd_database_bytes{")
		return quota == 32<<20 && database > 0, nil
	}); err != nil {
		quota, _ := metricFloat(t, s, "nodus_etcd_database_quota_bytes{")
		database, _ := metricFloat(t, s, "nodus_etcd_database_bytes{")
		t.Fatalf("the store's figures on /metrics: database %v bytes, quota %v", database, quota)
	}
}
