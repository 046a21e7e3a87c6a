package storagespace

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
)

const testQuota = 32 << 20

// member starts an etcd member with a quota of testQuota and a client of
// it over its client port, as an external etcd is reached.
func member(t *testing.T) (*clientv3.Client, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := embeddedetcd.StartWithQuota(dir, time.Minute, testQuota)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	cfg, err := embeddedetcd.ClientConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client, s.ClientURL
}

// only is the one reading a check of one member gives.
func only(t *testing.T, readings []Reading) Reading {
	t.Helper()
	if len(readings) != 1 {
		t.Fatalf("%d readings of one member: %+v", len(readings), readings)
	}
	return readings[0]
}

// published reads the member's three figures from /metrics' registry.
func published(t *testing.T, endpoint string) (database, inUse, quota float64) {
	t.Helper()
	var err error
	if database, err = testutil.GetGaugeMetricValue(databaseBytes.WithLabelValues(endpoint)); err != nil {
		t.Fatal(err)
	}
	if inUse, err = testutil.GetGaugeMetricValue(inUseBytes.WithLabelValues(endpoint)); err != nil {
		t.Fatal(err)
	}
	if quota, err = testutil.GetGaugeMetricValue(quotaBytes.WithLabelValues(endpoint)); err != nil {
		t.Fatal(err)
	}
	return database, inUse, quota
}

// A member filling up is warned about before etcd refuses a write, again
// every Repeat while it stays past the line, and no more once it is back
// under it.
func TestAMemberIsWarnedAboutBeforeItIsFull(t *testing.T) {
	client, endpoint := member(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	w := &Watcher{Client: client, Endpoints: []string{endpoint}, Repeat: time.Hour, now: func() time.Time { return now }}

	r := only(t, w.Check(ctx))
	if r.Quota != testQuota || r.Database <= 0 || r.Past || r.Warned {
		t.Fatalf("an empty member: %+v", r)
	}
	if database, inUse, quota := published(t, endpoint); database != float64(r.Database) || inUse != float64(r.InUse) || quota != testQuota {
		t.Fatalf("published %v, %v, %v; read %+v", database, inUse, quota, r)
	}

	// Small writes: etcd's status shows the database as its backend last
	// committed it (every 100 ms), some writes behind; with 1 MiB writes
	// CI saw it go from under the line to past the quota in one step.
	value := strings.Repeat("x", 64<<10)
	written := 0
	for !r.Past {
		if written == 640 {
			t.Fatalf("40 MiB written to a member of %d bytes and no warning: %+v", testQuota, r)
		}
		if _, err := client.Put(ctx, fmt.Sprint("/fill/", written), value); err != nil {
			t.Fatalf("write %d, before any warning: %v", written, err)
		}
		written++
		r = only(t, w.Check(ctx))
		if r.Past != r.Warned {
			t.Fatalf("the first check past the line: %+v", r)
		}
	}
	if float64(r.Database) < WarnAt*testQuota || r.Database >= testQuota {
		t.Fatalf("warned at %d bytes of %d", r.Database, testQuota)
	}
	if database, _, _ := published(t, endpoint); database != float64(r.Database) {
		t.Fatalf("published %v; read %+v", database, r)
	}
	// Warned before the member refuses anything: the next write passes.
	if _, err := client.Put(ctx, "/after-the-warning", "v"); err != nil {
		t.Fatalf("a write right after the warning: %v", err)
	}

	if r := only(t, w.Check(ctx)); !r.Past || r.Warned {
		t.Fatalf("a check right after the warning: %+v", r)
	}
	now = now.Add(time.Hour)
	if r := only(t, w.Check(ctx)); !r.Past || !r.Warned {
		t.Fatalf("a check a Repeat after the warning: %+v", r)
	}

	// Deleted, compacted and defragmented: back under the line.
	deleted, err := client.Delete(ctx, "/fill/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Compact(ctx, deleted.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Defragment(ctx, endpoint); err != nil {
		t.Fatal(err)
	}
	if r := only(t, w.Check(ctx)); r.Past || r.Warned || !r.Relieved {
		t.Fatalf("a check after the data went: %+v", r)
	}
	if r := only(t, w.Check(ctx)); r.Relieved {
		t.Fatalf("relieved twice: %+v", r)
	}
}

// A member that does not answer is skipped; a stopped watcher takes its
// members' figures off /metrics.
func TestRunPublishesUntilItStops(t *testing.T) {
	client, endpoint := member(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{Client: client, Endpoints: []string{endpoint, "http://127.0.0.1:1"}}
	done := make(chan struct{})
	go func() {
		w.Run(ctx, time.Hour)
		close(done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !isPublished(t, endpoint) {
		if time.Now().After(deadline) {
			t.Fatal("the member's figures were not published in 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if isPublished(t, "http://127.0.0.1:1") {
		t.Fatal("figures published for a member that does not answer")
	}
	cancel()
	<-done
	if isPublished(t, endpoint) {
		t.Fatal("the member's figures stayed after the watcher stopped")
	}
}

// isPublished says whether /metrics' registry holds a database size for
// endpoint.
func isPublished(t *testing.T, endpoint string) bool {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "nodus_etcd_database_bytes" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "endpoint" && l.GetValue() == endpoint {
					return true
				}
			}
		}
	}
	return false
}
