package executionlog

import (
	"bytes"
	"context"
	"sync/atomic"
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

// TestAnOutputWithinTheIntervalReadsNothing: an output report within
// MinInterval of the last one stored was dropped only after the kept tail,
// up to 342 KiB of JSON, was read from etcd and decoded, for every upload
// of every running execution (agents upload every 2 s, the interval is
// 5 s). This replica drops it before any read; the end's output still
// reads and writes.
func TestAnOutputWithinTheIntervalReadsNothing(t *testing.T) {
	client := startEtcd(t)
	reads := &countingKV{KV: client.KV}
	client.KV = reads
	logs := NewStore(client)
	logs.MinInterval = time.Hour
	ctx := context.Background()
	tail := bytes.Repeat([]byte("x"), 256<<10)
	for i := 0; i < 20; i++ {
		tail[i] = 'y'
		if err := logs.Put(ctx, "p", "e", "uid-1", Log{Data: tail}); err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.gets.Load(); n != 1 {
		t.Errorf("20 outputs within the interval read the kept one %d times, want once (the first, which found none)", n)
	}
	if err := logs.Put(ctx, "p", "e", "uid-1", Log{Data: []byte("the end"), Final: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := logs.Get(ctx, "p", "e", "uid-1"); string(got.Data) != "the end" || !got.Final {
		t.Errorf("the end's output within the interval: %q final %v", got.Data, got.Final)
	}
	other := NewStore(client) // another replica, which stored nothing
	other.MinInterval = time.Hour
	before := reads.gets.Load()
	if err := other.Put(ctx, "p", "e", "uid-1", Log{Data: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	if reads.gets.Load() == before {
		t.Error("a replica that stored nothing did not read the kept output")
	}
	if got, _ := logs.Get(ctx, "p", "e", "uid-1"); string(got.Data) != "the end" {
		t.Errorf("a late output replaced the end's: %q", got.Data)
	}
}

// TestTheStoredTimesAreSwept: a replica remembers when it stored each log
// only while that holds an output back.
func TestTheStoredTimesAreSwept(t *testing.T) {
	logs := &Store{MinInterval: time.Millisecond}
	for i := 0; i < 3000; i++ {
		logs.remember(string(rune('a'+i%26)) + "/" + time.Duration(i).String())
		if i%500 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if n := len(logs.stored); n > 2048 {
		t.Errorf("%d stored times kept for 3,000 logs stored over 12 ms with a 1 ms interval", n)
	}
}

// countingKV counts the reads through a client.
type countingKV struct {
	clientv3.KV
	gets atomic.Int64
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	c.gets.Add(1)
	return c.KV.Get(ctx, key, opts...)
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
