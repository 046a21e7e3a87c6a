package allocation

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

func readyNode(name, class string, rv int, traits ...string) *nodusv1.Node {
	return &nodusv1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uidOf(name), ResourceVersion: fmt.Sprint(rv)},
		Spec:       nodusv1.NodeSpec{ResourceClass: class, Traits: traits},
		Status: nodusv1.NodeStatus{ProvisionState: nodusv1.ProvisionStateAvailable,
			Conditions: []metav1.Condition{{Type: nodusv1.NodeConditionReady, Status: metav1.ConditionTrue}}},
	}
}

func allocationOf(name, class string, traits ...string) *nodusv1.Allocation {
	return &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodusv1.AllocationSpec{IronicName: name, ResourceClass: class, Traits: traits}}
}

func TestFreeIndexTakesEachNodeOnce(t *testing.T) {
	x, rnd := newFreeIndex(), rand.New(rand.NewPCG(1, 2))
	for i := range 100 {
		x.update(readyNode(fmt.Sprintf("n%03d", i), "gpu", 10))
	}
	x.update(readyNode("other", "cpu", 10))
	seen := map[string]bool{}
	for i := range 100 {
		n := x.take(allocationOf(fmt.Sprint("a", i), "gpu"), rnd, nil)
		if n == nil || seen[n.Name] || n.Spec.ResourceClass != "gpu" {
			t.Fatalf("take %d: %v (taken before: %v)", i, n, n != nil && seen[n.Name])
		}
		seen[n.Name] = true
	}
	if n := x.take(allocationOf("a-more", "gpu"), rnd, nil); n != nil {
		t.Fatalf("every gpu node is taken, got %s", n.Name)
	}
}

func TestFreeIndexNameFirstAndTraits(t *testing.T) {
	x, rnd := newFreeIndex(), rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		x.update(readyNode(fmt.Sprintf("n%03d", i), "gpu", 10))
	}
	x.update(readyNode("n-ib", "gpu", 10, "CUSTOM_IB"))
	if n := x.take(allocationOf("n007", "gpu"), rnd, nil); n == nil || n.Name != "n007" {
		t.Errorf("the node named like the allocation goes first: %v", n)
	}
	if n := x.take(allocationOf("a1", "gpu", "CUSTOM_IB"), rnd, nil); n == nil || n.Name != "n-ib" {
		t.Errorf("the one node with the trait: %v", n)
	}
	if n := x.take(allocationOf("a2", "gpu", "CUSTOM_IB"), rnd, nil); n != nil {
		t.Errorf("no node with the trait is left: %v", n.Name)
	}
	skip := map[string]bool{}
	for i := range 50 {
		if i != 7 {
			skip[fmt.Sprintf("n%03d", i)] = true
		}
	}
	delete(skip, "n010")
	if n := x.take(allocationOf("a3", "gpu"), rnd, skip); n == nil || n.Name != "n010" {
		t.Errorf("the one node not skipped: %v", n)
	}
}

func TestFreeIndexKeepsAClaimOutUntilTheCacheSeesIt(t *testing.T) {
	x, rnd := newFreeIndex(), rand.New(rand.NewPCG(1, 2))
	x.update(readyNode("n1", "gpu", 10))
	n := x.take(allocationOf("a1", "gpu"), rnd, nil)
	if n == nil {
		t.Fatal("nothing to take")
	}
	// A heartbeat-era event from before the claim was written.
	x.update(readyNode("n1", "gpu", 11))
	if x.take(allocationOf("a2", "gpu"), rnd, nil) != nil {
		t.Fatal("a node being claimed came back from an older cache")
	}
	x.claimed("n1", "a1", 20)
	if held, ok := x.holderOf("a1"); !ok || held.Name != "n1" {
		t.Errorf("the claim is known before the cache shows it: %v %v", held, ok)
	}
	x.update(readyNode("n1", "gpu", 15))
	if x.take(allocationOf("a2", "gpu"), rnd, nil) != nil {
		t.Fatal("a cache older than the claim gave the node back")
	}
	claimedNode := readyNode("n1", "gpu", 20)
	claimedNode.Status.Allocation = "a1"
	x.update(claimedNode)
	if x.take(allocationOf("a2", "gpu"), rnd, nil) != nil {
		t.Fatal("an allocated node is not free")
	}
	// The allocation was deleted and the node freed.
	x.update(readyNode("n1", "gpu", 30))
	if _, ok := x.holderOf("a1"); ok {
		t.Errorf("a freed node still holds a1")
	}
	if n := x.take(allocationOf("a2", "gpu"), rnd, nil); n == nil {
		t.Fatal("a freed node is free again")
	}
	// A failed claim gives the node back as the cache shows it.
	x.untake("n1")
	if n := x.take(allocationOf("a3", "gpu"), rnd, nil); n == nil {
		t.Fatal("a node whose claim failed is free again")
	}
}

// A claim that got no answer keeps its node out, whatever the cache shows,
// until an answer tells whether it landed.
func TestFreeIndexKeepsAnUnansweredClaimOut(t *testing.T) {
	x, rnd := newFreeIndex(), rand.New(rand.NewPCG(1, 2))
	x.update(readyNode("n1", "gpu", 10))
	x.update(readyNode("n2", "gpu", 10))
	n := x.take(allocationOf("a1", "gpu"), rnd, nil)
	x.unansweredClaim(n, "a1")
	x.update(readyNode(n.Name, "gpu", 11)) // a cache from before the claim
	if got, ok := x.unansweredOf("a1"); !ok || got.Name != n.Name {
		t.Fatalf("unanswered claim of a1: %v %v", got, ok)
	}
	other := x.take(allocationOf("a2", "gpu"), rnd, nil)
	if other == nil || other.Name == n.Name {
		t.Fatalf("the node of an unanswered claim was offered again: %v", other)
	}
	if x.take(allocationOf("a3", "gpu"), rnd, nil) != nil {
		t.Fatal("a node came back while its claim is unanswered")
	}
	// Read back: it landed.
	x.claimed(n.Name, "a1", 12)
	if _, ok := x.unansweredOf("a1"); ok {
		t.Error("a claim read back as landed is still unanswered")
	}
	// Another one, read back: it did not land; the node is free again.
	x.unansweredClaim(other, "a2")
	x.untake(other.Name)
	if _, ok := x.unansweredOf("a2"); ok {
		t.Error("a claim read back as not landed is still unanswered")
	}
	if got := x.take(allocationOf("a4", "gpu"), rnd, nil); got == nil || got.Name != other.Name {
		t.Fatalf("the node of a claim that did not land is free again: %v", got)
	}
}

func TestFreeIndexFollowsTheNode(t *testing.T) {
	x, rnd := newFreeIndex(), rand.New(rand.NewPCG(1, 2))
	n := readyNode("n1", "gpu", 10)
	n.Spec.Maintenance = true
	x.update(n)
	if x.take(allocationOf("a", "gpu"), rnd, nil) != nil {
		t.Error("a node in maintenance was taken")
	}
	x.update(readyNode("n1", "cpu", 11))
	if x.take(allocationOf("a", "gpu"), rnd, nil) != nil {
		t.Error("a node moved to another class was taken for its old one")
	}
	if got, ok := x.lookup(string(uidOf("n1"))); !ok || got.Name != "n1" {
		t.Errorf("lookup by UID: %v %v", got, ok)
	}
	x.remove("n1")
	if x.take(allocationOf("a", "cpu"), rnd, nil) != nil || len(x.nodes) != 0 {
		t.Error("a deleted node is still indexed")
	}
}

// claimable is choose's rules in one test: the two must agree on every
// node, or the index offers nodes choose would refuse (or hides ones it
// would take).
func TestClaimableAgreesWithChoose(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	variants := map[string]func(*nodusv1.Node){
		"free":        func(*nodusv1.Node) {},
		"maintenance": func(n *nodusv1.Node) { n.Spec.Maintenance = true },
		"not ready":   func(n *nodusv1.Node) { n.Status.Conditions[0].Status = metav1.ConditionFalse },
		"allocated":   func(n *nodusv1.Node) { n.Status.Allocation = "other" },
		"reserved":    func(n *nodusv1.Node) { n.Status.Reservation = "r1" },
		"active":      func(n *nodusv1.Node) { n.Status.ProvisionState = nodusv1.ProvisionStateActive },
		"cleaning":    func(n *nodusv1.Node) { n.Status.ProvisionState = nodusv1.ProvisionStateCleaning },
		"enroll":      func(n *nodusv1.Node) { n.Status.ProvisionState = nodusv1.ProvisionStateEnroll },
	}
	// A waiting allocation looks again only when a node's standing
	// changes: so each standing must be one reason of choose's, and
	// each reason one standing.
	reasonOf := map[nodeStanding]string{}
	standingOf := map[string]nodeStanding{}
	for name, change := range variants {
		n := readyNode("n1", "gpu", 10)
		change(n)
		chosen, why := choose(allocationOf("a", "gpu"), []*nodusv1.Node{n}, rnd)
		if claimable(n) != (chosen != nil) {
			t.Errorf("%s: claimable says %v, choose took %v", name, claimable(n), chosen != nil)
		}
		st := standing(n)
		if seen, ok := reasonOf[st]; ok && seen != why {
			t.Errorf("%s: standing %d is both %q and %q", name, st, seen, why)
		}
		if seen, ok := standingOf[why]; ok && seen != st {
			t.Errorf("%s: reason %q is both standing %d and %d", name, why, seen, st)
		}
		reasonOf[st], standingOf[why] = why, st
	}
}

// whyNoneFree words in one pass what choose words by narrowing the field
// rule by rule: the two must say the same of every fleet.
func TestWhyNoneFreeAgreesWithChoose(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	changes := []func(*nodusv1.Node){
		func(*nodusv1.Node) {},
		func(n *nodusv1.Node) { n.Spec.Maintenance = true },
		func(n *nodusv1.Node) { n.Status.Conditions[0].Status = metav1.ConditionFalse },
		func(n *nodusv1.Node) { n.Status.Allocation = "other" },
		func(n *nodusv1.Node) { n.Status.ProvisionState = nodusv1.ProvisionStateCleaning },
		func(n *nodusv1.Node) { n.Spec.ResourceClass = "cpu" },
		func(n *nodusv1.Node) { n.Spec.Traits = []string{"CUSTOM_IB"} },
	}
	asks := []*nodusv1.Allocation{allocationOf("a", "gpu"), allocationOf("a", "gpu", "CUSTOM_IB"), allocationOf("a", "tpu")}
	withCandidates := allocationOf("a", "gpu")
	withCandidates.Spec.CandidateNodes = []string{"n1", string(uidOf("n2"))}
	asks = append(asks, withCandidates)
	for trial := range 2000 {
		nodes := make([]*nodusv1.Node, rnd.IntN(4))
		for i := range nodes {
			nodes[i] = readyNode(fmt.Sprint("n", i), "gpu", 10)
			for range rnd.IntN(3) {
				changes[rnd.IntN(len(changes))](nodes[i])
			}
		}
		for _, a := range asks {
			chosen, want := choose(a, nodes, rnd)
			if chosen != nil {
				want = ""
			}
			if got := whyNoneFree(a, slices.Values(nodes)); got != want {
				t.Fatalf("trial %d, %v: whyNoneFree says %q, choose %q (took %v)", trial, a.Spec, got, want, chosen != nil)
			}
		}
	}
}

// The index keeps why allocations wait until a node changes: a node that
// became free, or one that went, changes the answer.
func TestFreeIndexWhyFollowsTheNodes(t *testing.T) {
	x := newFreeIndex()
	n := readyNode("n1", "gpu", 10)
	n.Status.Allocation = "other"
	x.update(n)
	a := allocationOf("a", "gpu")
	if why := x.whyNoneFree(a); why != "every matching node is already allocated or in use" {
		t.Fatalf("why, the one node in use: %q", why)
	}
	x.update(readyNode("n1", "gpu", 11))
	if why := x.whyNoneFree(a); why != "" {
		t.Errorf("why, the node free again: %q", why)
	}
	x.remove("n1")
	if why := x.whyNoneFree(a); why != `no node has resource class "gpu"` {
		t.Errorf("why, the node gone: %q", why)
	}
	if why := x.whyNoneFree(allocationOf("b", "gpu", "CUSTOM_IB")); why != `no node has resource class "gpu"` {
		t.Errorf("why, for other traits: %q", why)
	}
}

// uidOf is the UID of the test's node of name, a UUID as the API gives.
func uidOf(name string) types.UID {
	return types.UID(uuid.NewSHA1(uuid.NameSpaceOID, []byte(name)).String())
}

// TestAUIDNamesItsNodeWhateverNodeIsNamedLikeIt: /v1 stores an
// allocation's candidates and backfilled node as UIDs, as Ironic resolves
// them. A node may be named like another's UID (an agent enrolled by a
// token that names no node picks its name); looked up by name first, such
// an ident took the node of that name, not the node of that UID. A node
// named like a UID that no node has is still found by its name.
func TestAUIDNamesItsNodeWhateverNodeIsNamedLikeIt(t *testing.T) {
	x := newFreeIndex()
	meant := readyNode("meant", "gpu", 10)
	impostor := readyNode(string(meant.UID), "gpu", 11)
	x.update(impostor)
	x.update(meant)
	if got, ok := x.lookup(string(meant.UID)); !ok || got.Name != "meant" {
		t.Errorf("lookup of a UUID: %v %v, want node meant", got, ok)
	}
	hostnamed := readyNode(string(uidOf("a host named by a UUID")), "gpu", 12)
	x.update(hostnamed)
	if got, ok := x.lookup(hostnamed.Name); !ok || got != hostnamed {
		t.Errorf("lookup of a node named like a UID no node has: %v %v", got, ok)
	}
}

// TestABackfillSaysWhetherTheCleaningGoesOnOrFailed: an allocation for a
// node that owes its cleaning waits in either case, but one whose cleaning
// failed waits for an operator, and its last error says so.
func TestABackfillSaysWhetherTheCleaningGoesOnOrFailed(t *testing.T) {
	a := allocationOf("a1", "")
	a.Spec.Node = "n1"
	cleaning := readyNode("n1", "gpu", 10)
	cleaning.Status.ProvisionState = nodusv1.ProvisionStateCleaning
	cleaning.Status.Cleaning = &nodusv1.NodeCleaning{Request: 2, Phase: nodusv1.CleaningPending}
	if n, why := backfill(a, []*nodusv1.Node{cleaning}); n != nil || why != "node n1 is being cleaned after its previous tenant (cleaning request 2)" {
		t.Errorf("a node being cleaned: %v %q", n, why)
	}
	failed := cleaning.DeepCopy()
	failed.Status.Cleaning.Phase, failed.Status.Cleaning.Message = nodusv1.CleaningFailed, "resetting ops: removing files in /tmp: permission denied"
	failed.Spec.Maintenance = true
	n, why := backfill(a, []*nodusv1.Node{failed})
	if n != nil || !strings.Contains(why, "failed (cleaning request 2)") || !strings.Contains(why, "nodus nodes clean n1") || strings.Contains(why, "resetting ops") {
		t.Errorf("a node whose cleaning failed: %v %q", n, why)
	}
}
