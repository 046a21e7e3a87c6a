package integration

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestGenerationCountsSpecChanges: every nodus.dev object kept generation
// 0 for ever (or what its creator wrote there): tools that compare
// metadata.generation with what a controller observed (kstatus, Flux,
// Argo CD) saw no change. As in Kubernetes, an object is made at
// generation 1, and each change of its spec, and only of its spec, counts
// one; no client writes it.
func TestGenerationCountsSpecChanges(t *testing.T) {
	s := testserver.StartTestServer(t)
	c, ctx := s.Client.NodusV1(), ctx(t)
	pool, err := c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "fra2", Generation: 7}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pool.Generation != 1 {
		t.Errorf("a pool made with generation 7: generation %d, want 1", pool.Generation)
	}
	patch := func(kind, name, subresource, body string) int64 {
		t.Helper()
		pt, raw := types.MergePatchType, []byte(body)
		var sub []string
		if subresource != "" {
			sub = []string{subresource}
		}
		var obj interface{ GetGeneration() int64 }
		switch kind {
		case "pools":
			obj, err = c.Pools().Patch(ctx, name, pt, raw, metav1.PatchOptions{}, sub...)
		case "nodes":
			obj, err = c.Nodes().Patch(ctx, name, pt, raw, metav1.PatchOptions{}, sub...)
		}
		if err != nil {
			t.Fatalf("patch %s %s %s: %v", kind, name, body, err)
		}
		return obj.GetGeneration()
	}
	for _, step := range []struct {
		what, kind, name, subresource, body string
		want                                int64
	}{
		{"the pool's spec changed", "pools", "fra2", "", `{"spec":{"supplier":"acme-dc"}}`, 2},
		{"its labels changed", "pools", "fra2", "", `{"metadata":{"labels":{"tier":"gold"}}}`, 2},
		{"its spec written as it is", "pools", "fra2", "", `{"spec":{"supplier":"acme-dc"}}`, 2},
		{"a generation written by a client", "pools", "fra2", "", `{"metadata":{"generation":40}}`, 2},
		{"its spec changed again", "pools", "fra2", "", `{"spec":{"location":"fra"}}`, 3},
	} {
		if got := patch(step.kind, step.name, step.subresource, step.body); got != step.want {
			t.Errorf("%s: generation %d, want %d", step.what, got, step.want)
		}
	}
	f := newFleet(t, s)
	f.node(t, "gpu-001")
	node, err := c.Nodes().Get(ctx, "gpu-001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := node.Generation
	if got := patch("nodes", "gpu-001", "status", `{"status":{"sshAddress":"203.0.113.7:22"}}`); got != before {
		t.Errorf("a node's status written: generation %d, want %d", got, before)
	}
	if got := patch("nodes", "gpu-001", "", `{"spec":{"maintenance":true}}`); got != before+1 {
		t.Errorf("a node put in maintenance: generation %d, want %d", got, before+1)
	}
	// A spec the server completes on update (an enrollment token sent
	// without its expiry keeps the one it has) is no change.
	tok, err := c.EnrollmentTokens().Create(ctx, &nodusv1.EnrollmentToken{ObjectMeta: metav1.ObjectMeta{Name: "rack-1"},
		Spec: nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok.Spec.ExpiresAt, tok.Labels = nil, map[string]string{"rack": "1"}
	if tok, err = c.EnrollmentTokens().Update(ctx, tok, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if tok.Generation != 1 {
		t.Errorf("an enrollment token updated without its expiry: generation %d, want 1", tok.Generation)
	}
	// A kind without a spec stays at 1, however its status moves.
	h := f.host(t, "gpu-002", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if h.Generation != 1 {
		t.Errorf("a reserved host: generation %d, want 1", h.Generation)
	}
}
