package integration

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestWhatTheServerRecordedIsNotWrittenBack writes, as an operator, status
// the server keeps for itself: a node's agent generation lowered (an old
// manifest's status, which made a retired agent credential valid again)
// and a used enrollment token's use cleared (which made it enroll again).
func TestWhatTheServerRecordedIsNotWrittenBack(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	enrollAgent(t, s, "recorded", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}, t.TempDir())
	c := s.Client.NodusV1()
	n, err := c.Nodes().Get(ctx(t), "recorded", metav1.GetOptions{})
	if err != nil || n.Status.AgentGeneration < 1 {
		t.Fatalf("the enrolled node: %v %+v", err, n)
	}
	n.Status.AgentGeneration--
	if _, err := c.Nodes().UpdateStatus(ctx(t), n, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a lower agent generation: %v", err)
	}

	tokens, err := c.EnrollmentTokens().List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, token := range tokens.Items {
		if token.Status.UsedAt == nil {
			continue
		}
		used++
		_, err := c.EnrollmentTokens().Patch(ctx(t), token.Name, types.MergePatchType,
			[]byte(`{"status":{"usedAt":null,"usedBy":""}}`), metav1.PatchOptions{}, "status")
		if !apierrors.IsInvalid(err) {
			t.Errorf("token %s's use cleared: %v", token.Name, err)
		}
		_, err = c.EnrollmentTokens().Patch(ctx(t), token.Name, types.MergePatchType,
			[]byte(`{"spec":{"nodeName":"another"}}`), metav1.PatchOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("token %s moved to another node: %v", token.Name, err)
		}
	}
	if used == 0 {
		t.Fatal("no used enrollment token to write over")
	}
}
