package integration

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testserver"
	"github.com/nodus-dev/nodus/pkg/wire"
)

// TestJSONListsShowEveryWrite lists through a JSON client, whose lists the
// server writes from the JSON it kept of each object (package jsonlist),
// after creates, updates, a status update and a deletion, and compares each
// list with a protobuf list at the same resourceVersion, which the server
// encodes afresh.
func TestJSONListsShowEveryWrite(t *testing.T) {
	s := testserver.StartTestServer(t)
	ctx := ctx(t)
	pb, err := versioned.NewForConfig(wire.Protobuf(s.Config))
	if err != nil {
		t.Fatal(err)
	}
	nodes := s.Client.NodusV1().Nodes()
	compare := func(step string) *nodusv1.NodeList {
		t.Helper()
		viaJSON, err := nodes.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("%s: JSON list: %v", step, err)
		}
		viaProtobuf, err := pb.NodusV1().Nodes().List(ctx, metav1.ListOptions{
			ResourceVersion: viaJSON.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			t.Fatalf("%s: protobuf list at %s: %v", step, viaJSON.ResourceVersion, err)
		}
		if !equality.Semantic.DeepEqual(viaJSON.Items, viaProtobuf.Items) {
			t.Fatalf("%s: the JSON list differs from the protobuf list at its resourceVersion %s:\nJSON     %+v\nprotobuf %+v",
				step, viaJSON.ResourceVersion, viaJSON.Items, viaProtobuf.Items)
		}
		return viaJSON
	}
	find := func(list *nodusv1.NodeList, name string) *nodusv1.Node {
		for i := range list.Items {
			if list.Items[i].Name == name {
				return &list.Items[i]
			}
		}
		return nil
	}

	for _, name := range []string{"list-a", "list-b", "list-c"} {
		if _, err := nodes.Create(ctx, &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: nodusv1.NodeSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	compare("created")
	compare("listed again")

	b, err := nodes.Get(ctx, "list-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Labels = map[string]string{"rack": "r7"}
	if _, err := nodes.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := find(compare("labelled"), "list-b"); got == nil || got.Labels["rack"] != "r7" {
		t.Fatalf("list-b after its update: %+v", got)
	}

	c, err := nodes.Get(ctx, "list-c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Inventory = nodusv1.NodeInventory{CPU: 224, GPUs: []nodusv1.NodeGPU{{Type: "h100-sxm-80g", MemoryMiB: 81559}}}
	if _, err := nodes.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := find(compare("inventoried"), "list-c"); got == nil || got.Status.Inventory.CPU != 224 {
		t.Fatalf("list-c after its status update: %+v", got)
	}

	if err := nodes.Delete(ctx, "list-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := find(compare("deleted"), "list-a"); got != nil && got.DeletionTimestamp == nil {
		t.Fatalf("list-a is listed as it was before its deletion: %+v", got)
	}
}
