package executionlog

import (
	"context"
	"testing"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// TestAFinalOutputIsNotReplaced: an output report in flight when the end's
// report landed wrote after it, and the borrower's final output became an
// earlier one. Later outputs before the end replace earlier ones.
func TestAFinalOutputIsNotReplaced(t *testing.T) {
	etcd, client, err := testfleet.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); etcd.Stop(context.Background()) })
	logs := NewStore(client)
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
	resp, err := client.Get(ctx, logs.key("p", "e", "uid-1"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the log is kept on a lease: %v %+v", err, resp)
	}
}
