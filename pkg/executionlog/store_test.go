package executionlog

import (
	"bytes"
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// TestAFinalOutputIsNotReplaced: an output report in flight when the end's
// report landed wrote after it, and the borrower's final output became an
// earlier one. Later outputs before the end replace earlier ones.
func TestAFinalOutputIsNotReplaced(t *testing.T) {
	logs := NewStore(startEtcd(t))
	ctx := context.Background()
	for _, l := range []Log{{Data: []byte("first")}, {Data: []byte("second")}, {Data: []byte("the end"), Final: true}, {Data: []byte("late")}} {
		if err := logs.Put(ctx, "p", "e", "uid-1", l); err != nil {
			t.Fatal(err)
		}
	}
	got, err := logs.Get(ctx, "p", "e", "uid-1")
	if err != nil || string(got.Data) != "the end" {
		t.Fatalf("the kept output: %q %v", got.Data, err)
	}
	resp, err := logs.Client.Get(ctx, logs.key("p", "e", "uid-1"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the log is kept on a lease: %v %+v", err, resp)
	}
}

// TestARunningOutputIsStoredAtMostEveryInterval: each output report
// carries the whole tail, up to 256 KiB, and every stored one is a revision
// etcd keeps until its compaction. An agent reporting every 2 s for each of
// its executions, or a copied agent credential reporting in a loop, wrote a
// tail each time, changed or not. A running execution's output is stored
// when it changed and MinInterval after the last one stored; the end's
// output always is.
func TestARunningOutputIsStoredAtMostEveryInterval(t *testing.T) {
	logs := NewStore(startEtcd(t))
	logs.MinInterval = time.Second
	ctx := context.Background()
	writes := func() int64 {
		t.Helper()
		resp, err := logs.Client.Get(ctx, logs.key("p", "e", "uid-1"))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the log: %v %+v", err, resp)
		}
		return resp.Kvs[0].Version
	}
	tail := bytes.Repeat([]byte("x"), 256<<10)
	for i := 0; i < 50; i++ {
		tail[i] = 'y' // changed every time
		if err := logs.Put(ctx, "p", "e", "uid-1", Log{Data: tail}); err != nil {
			t.Fatal(err)
		}
	}
	if n := writes(); n != 1 {
		t.Errorf("50 outputs within the interval were stored %d times, want once", n)
	}
	time.Sleep(logs.MinInterval + 100*time.Millisecond)
	if err := logs.Put(ctx, "p", "e", "uid-1", Log{Data: []byte("later")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := logs.Get(ctx, "p", "e", "uid-1"); string(got.Data) != "later" || writes() != 2 {
		t.Errorf("an output past the interval: %q, %d writes", got.Data, writes())
	}
	time.Sleep(logs.MinInterval + 100*time.Millisecond)
	if err := logs.Put(ctx, "p", "e", "uid-1", Log{Data: []byte("later")}); err != nil {
		t.Fatal(err)
	}
	if n := writes(); n != 2 {
		t.Errorf("an unchanged output was stored again: %d writes", n)
	}
	if err := logs.Put(ctx, "p", "e", "uid-1", Log{Data: []byte("the end"), Final: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := logs.Get(ctx, "p", "e", "uid-1"); string(got.Data) != "the end" || !got.Final {
		t.Errorf("the end's output right after another: %q final %v", got.Data, got.Final)
	}
}

// startEtcd is a real etcd for the test, the client to it closed with it.
func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	etcd, client, err := testfleet.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); etcd.Stop(context.Background()) })
	return client
}
