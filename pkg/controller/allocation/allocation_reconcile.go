package allocation

import (
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
)

// choose picks the node for an allocation with Ironic's rules: the resource
// class must match, the node's traits must include every requested trait,
// the node must be a candidate when candidates are given, and available (no
// allocation, not in maintenance, its agent ready). A node named like the
// allocation goes first; otherwise the pick is random, so that concurrent
// allocators rarely collide. With no node, lastError names the constraint
// that emptied the field.
func choose(a *nodusv1.Allocation, nodes []*nodusv1.Node, rnd *rand.Rand) (node *nodusv1.Node, lastError string) {
	if a.Spec.Node != "" {
		return backfill(a, nodes)
	}
	field := nodes
	for _, r := range rulesFor(a) {
		var kept []*nodusv1.Node
		for _, n := range field {
			if r.keep(n) {
				kept = append(kept, n)
			}
		}
		if len(kept) == 0 {
			return nil, r.why
		}
		field = kept
	}
	// As Ironic: a node named like the allocation (its Ironic name) goes
	// first.
	for _, n := range field {
		if a.Spec.IronicName != "" && n.Name == a.Spec.IronicName {
			return n, ""
		}
	}
	sort.Slice(field, func(i, j int) bool { return field[i].Name < field[j].Name })
	return field[rnd.IntN(len(field))], ""
}

// backfill records an allocation for a named node, even one already in use,
// as Ironic 1.58 does, unless another allocation or a live reservation holds
// it (a reservation's node is its tenant's alone) or it owes its cleaning
// after a tenant: no one takes a node before it is clean (Ironic backfills
// only an active node; Nodus backfills an available one too).
func backfill(a *nodusv1.Allocation, nodes []*nodusv1.Node) (*nodusv1.Node, string) {
	for _, n := range nodes {
		if n.Name != a.Spec.Node && string(n.UID) != a.Spec.Node {
			continue
		}
		if n.Status.Allocation != "" && !n.Status.ClaimedByAllocation(a) {
			return nil, fmt.Sprintf("node %s already has allocation %s", n.Name, n.Status.Allocation)
		}
		if n.Status.Reservation != "" {
			return nil, fmt.Sprintf("node %s is held by reservation %s", n.Name, n.Status.Reservation)
		}
		if lifecycle.OwesCleaning(n) {
			return nil, lifecycle.CleaningOwed(n)
		}
		if a.Spec.ResourceClass != "" && n.Spec.ResourceClass != a.Spec.ResourceClass {
			return nil, fmt.Sprintf("node %s has resource class %q, not %q", n.Name, n.Spec.ResourceClass, a.Spec.ResourceClass)
		}
		if !hasAll(n.Spec.Traits, a.Spec.Traits) {
			return nil, fmt.Sprintf("node %s lacks some of the traits %s", n.Name, strings.Join(a.Spec.Traits, ", "))
		}
		if len(a.Spec.CandidateNodes) > 0 && !slices.Contains(a.Spec.CandidateNodes, n.Name) && !slices.Contains(a.Spec.CandidateNodes, string(n.UID)) {
			// As Ironic's backfill (_do_backfill_allocation).
			return nil, fmt.Sprintf("candidate nodes must be empty or contain the target node %s, but got %s", n.Name, strings.Join(a.Spec.CandidateNodes, ", "))
		}
		return n, ""
	}
	return nil, fmt.Sprintf("node %s does not exist", a.Spec.Node)
}

// rule is one of choose's constraints on the nodes for an allocation by
// class, with what lastError says when it leaves none.
type rule struct {
	keep func(*nodusv1.Node) bool
	why  string
}

// rulesFor are choose's constraints for a, in the order they apply.
func rulesFor(a *nodusv1.Allocation) []rule {
	return []rule{
		{func(n *nodusv1.Node) bool { return n.Spec.ResourceClass == a.Spec.ResourceClass },
			fmt.Sprintf("no node has resource class %q", a.Spec.ResourceClass)},
		{func(n *nodusv1.Node) bool { return hasAll(n.Spec.Traits, a.Spec.Traits) },
			fmt.Sprintf("no node of resource class %q has all traits %s", a.Spec.ResourceClass, strings.Join(a.Spec.Traits, ", "))},
		{func(n *nodusv1.Node) bool {
			return len(a.Spec.CandidateNodes) == 0 || slices.Contains(a.Spec.CandidateNodes, n.Name) || slices.Contains(a.Spec.CandidateNodes, string(n.UID))
		}, fmt.Sprintf("none of the candidate nodes %s matches the resource class and traits", strings.Join(a.Spec.CandidateNodes, ", "))},
		{func(n *nodusv1.Node) bool { return !n.Spec.Maintenance }, "every matching node is in maintenance"},
		{func(n *nodusv1.Node) bool {
			return meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady)
		},
			"no matching node's agent is ready"},
		{func(n *nodusv1.Node) bool {
			return n.Status.Allocation == "" && n.Status.Reservation == "" && n.Status.ProvisionState != nodusv1.ProvisionStateActive
		}, "every matching node is already allocated or in use"},
		{func(n *nodusv1.Node) bool { return !lifecycle.OwesCleaning(n) },
			"every free matching node is being cleaned after its previous tenant"},
	}
}

// whyNoneFree is choose's lastError for an allocation by class, or "" when
// some node passes every rule, found in one pass that keeps nothing: the
// field choose narrows rule by rule empties at the first rule no node gets
// past, the rule after the most any node passes.
func whyNoneFree(a *nodusv1.Allocation, nodes iter.Seq[*nodusv1.Node]) string {
	rules := rulesFor(a)
	reached := 0
	for n := range nodes {
		passed := 0
		for passed < len(rules) && rules[passed].keep(n) {
			passed++
		}
		if passed == len(rules) {
			return ""
		}
		reached = max(reached, passed)
	}
	return rules[reached].why
}

func hasAll(have, want []string) bool {
	for _, t := range want {
		if !slices.Contains(have, t) {
			return false
		}
	}
	return true
}
