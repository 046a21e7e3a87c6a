package integration

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testserver"
	"github.com/nodus-dev/nodus/pkg/wire"
)

// TestProtobufServesEveryResource lists and watches every resource the
// server advertises in protobuf only, so a kind added without its protobuf
// encoding fails here rather than at a client's first request.
func TestProtobufServesEveryResource(t *testing.T) {
	s := testserver.StartTestServer(t)
	resources, err := s.Client.Discovery().ServerResourcesForGroupVersion(nodusv1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, r := range resources.APIResources {
		if strings.Contains(r.Name, "/") || !sets.New(r.Verbs...).HasAll("list", "watch") {
			continue
		}
		listed++
		path := "/apis/" + nodusv1.SchemeGroupVersion.String() + "/" + r.Name
		list := do(t, s.Config, "GET", path, "", nil, "Accept", runtime.ContentTypeProtobuf)
		if list.code != 200 || list.header.Get("Content-Type") != runtime.ContentTypeProtobuf || !bytes.HasPrefix(list.body, []byte("k8s\x00")) {
			t.Errorf("LIST %s in protobuf: %d %q %.200q", r.Name, list.code, list.header.Get("Content-Type"), list.body)
		}
		w := do(t, s.Config, "GET", path+"?watch=true&timeoutSeconds=1", "", nil, "Accept", runtime.ContentTypeProtobuf+";stream=watch")
		if w.code != 200 || !strings.HasPrefix(w.header.Get("Content-Type"), runtime.ContentTypeProtobuf) {
			t.Errorf("WATCH %s in protobuf: %d %q %.200q", r.Name, w.code, w.header.Get("Content-Type"), w.body)
		}
	}
	if listed < 10 {
		t.Fatalf("only %d listable resources in discovery: %v", listed, resources.APIResources)
	}
}

// TestProtobufClientSeesWhatJSONClientSees writes through a protobuf client
// and reads through a JSON one, and the other way round: the two encodings
// of one stored object must be the same object. Its errors keep Nodus'
// envelope, in JSON, with the message the JSON client gets.
func TestProtobufClientSeesWhatJSONClientSees(t *testing.T) {
	s := testserver.StartTestServer(t)
	ctx := ctx(t)
	pb, err := versioned.NewForConfig(wire.Protobuf(s.Config))
	if err != nil {
		t.Fatal(err)
	}
	jsonClient := s.Client.NodusV1()

	w, err := pb.NodusV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created, err := pb.NodusV1().Nodes().Create(ctx, &nodusv1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-pb", Labels: map[string]string{"rack": "r1"}},
		Spec:       nodusv1.NodeSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", Traits: []string{"CUSTOM_NVLINK", "CUSTOM_IB"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Inventory = nodusv1.NodeInventory{CPU: 224, MemoryMiB: 2 << 20, DiskGiB: 3500,
		GPUs: []nodusv1.NodeGPU{{Type: "h100-sxm-80g", MemoryMiB: 81559, Driver: "550.54.15"}}}
	updated, err := pb.NodusV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	viaJSON, err := jsonClient.Nodes().Get(ctx, "gpu-pb", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	viaProtobuf, err := pb.NodusV1().Nodes().Get(ctx, "gpu-pb", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]*nodusv1.Node{"JSON": viaJSON, "protobuf": viaProtobuf} {
		if !equality.Semantic.DeepEqual(updated, got) {
			t.Errorf("read in %s differs from the protobuf write:\nwrote %+v\nread  %+v", name, updated, got)
		}
	}
	if len(viaProtobuf.Status.Inventory.GPUs) != 1 || viaProtobuf.Spec.Traits[1] != "CUSTOM_IB" || viaProtobuf.Labels["rack"] != "r1" {
		t.Errorf("protobuf read lost fields: %+v", viaProtobuf)
	}
	for _, want := range []watch.EventType{watch.Added, watch.Modified} {
		e := <-w.ResultChan()
		if n, ok := e.Object.(*nodusv1.Node); e.Type != want || !ok || n.Name != "gpu-pb" {
			t.Fatalf("protobuf watch: %s %T, want %s of gpu-pb", e.Type, e.Object, want)
		}
	}

	// The same error, asked for in JSON and in protobuf.
	path := "/apis/nodus.dev/v1/nodes/missing"
	asJSON := envelopeOf(t, do(t, s.Config, "GET", path, "", nil, "Accept", runtime.ContentTypeJSON))
	r := do(t, s.Config, "GET", path, "", nil, "Accept", runtime.ContentTypeProtobuf+","+runtime.ContentTypeJSON)
	if ct := r.header.Get("Content-Type"); ct != runtime.ContentTypeJSON {
		t.Errorf("error for a protobuf client in %q, want the JSON envelope", ct)
	}
	asProtobuf := envelopeOf(t, r)
	if asProtobuf.Reason != asJSON.Reason || asProtobuf.Message != asJSON.Message || asProtobuf.Fix != asJSON.Fix {
		t.Errorf("protobuf client's error %q %q %q, JSON client's %q %q %q",
			asProtobuf.Reason, asProtobuf.Message, asProtobuf.Fix, asJSON.Reason, asJSON.Message, asJSON.Fix)
	}
	if _, err := pb.NodusV1().Nodes().Get(ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("protobuf client reads a missing node as %v, want NotFound", err)
	}
}
