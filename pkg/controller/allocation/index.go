package allocation

import (
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lifecycle"
)

// freeIndex keeps, from the node informer's events, the nodes an allocation
// may claim now, by resource class, and which node holds each allocation's
// claim: choosing a node costs a few map reads, not a scan of the fleet.
// A node this controller is claiming is taken out at once, ahead of the
// cache, so that two workers never try the same node; it comes back only
// from the cache, once the cache has seen the claim or its failure.
type freeIndex struct {
	mu      sync.Mutex
	byClass map[string]*nodeSet
	nodes   map[string]*nodusv1.Node // every node, as the cache last showed it
	byUID   map[string]string        // node UID → name
	holder  map[string]string        // allocation → node that names it
	// taken are the nodes being claimed by this controller, with the
	// resourceVersion of the claim once written (0 while it is written):
	// a cache older than that does not know of the claim yet.
	taken map[string]uint64
	// unanswered are claims written without an answer (a timeout, etcd's
	// leader lost), allocation → the node as the claim wrote it: the claim
	// may have landed, so the node stays taken until an answer tells.
	unanswered map[string]*nodusv1.Node
	// generation counts the changes to nodes; whyMemo holds, for the
	// generation whyGeneration, why allocations of a kind wait (whyKey):
	// a node that changes its standing wakes every allocation of its
	// class, and they would each scan the fleet for the same answer.
	generation, whyGeneration uint64
	whyMemo                   map[string]string
}

// nodeSet is a set of node names with uniform random choice.
type nodeSet struct {
	names []string
	pos   map[string]int
}

func newFreeIndex() *freeIndex {
	return &freeIndex{byClass: map[string]*nodeSet{}, nodes: map[string]*nodusv1.Node{}, byUID: map[string]string{},
		holder: map[string]string{}, taken: map[string]uint64{}, unanswered: map[string]*nodusv1.Node{}}
}

// nodeStanding is where a node stands for an allocation by class: the
// first of choose's rules, after class and traits, that it fails, or free.
type nodeStanding int

const (
	standingInMaintenance nodeStanding = iota
	standingNotReady
	standingInUse
	standingCleaning
	standingFree
)

func standing(n *nodusv1.Node) nodeStanding {
	switch {
	case n.Spec.Maintenance:
		return standingInMaintenance
	case !meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady):
		return standingNotReady
	case n.Status.Allocation != "" || n.Status.Reservation != "" || n.Status.ProvisionState == nodusv1.ProvisionStateActive:
		return standingInUse
	case lifecycle.OwesCleaning(n):
		return standingCleaning
	}
	return standingFree
}

// claimable says whether an allocation by class may claim n now: the rules
// of choose, in one test.
func claimable(n *nodusv1.Node) bool {
	return standing(n) == standingFree
}

// update records the node as the cache now shows it.
func (x *freeIndex) update(n *nodusv1.Node) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.forget(n.Name)
	x.generation++
	x.nodes[n.Name] = n
	x.byUID[string(n.UID)] = n.Name
	if n.Status.Allocation != "" {
		x.holder[n.Status.Allocation] = n.Name
	}
	if rv, ok := x.taken[n.Name]; ok {
		if rv == 0 || resourceVersion(n) < rv {
			return // the claim is being written, or the cache is older than it
		}
		delete(x.taken, n.Name)
	}
	if claimable(n) {
		x.set(n.Spec.ResourceClass).add(n.Name)
	}
}

// remove forgets a deleted node.
func (x *freeIndex) remove(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.forget(name)
	x.generation++
	delete(x.taken, name)
}

// forget drops what the index knows of the node, under x.mu.
func (x *freeIndex) forget(name string) {
	old, ok := x.nodes[name]
	if !ok {
		return
	}
	if s := x.byClass[old.Spec.ResourceClass]; s != nil {
		s.remove(name)
	}
	if x.holder[old.Status.Allocation] == name {
		delete(x.holder, old.Status.Allocation)
	}
	delete(x.byUID, string(old.UID))
	delete(x.nodes, name)
}

func (x *freeIndex) set(class string) *nodeSet {
	s := x.byClass[class]
	if s == nil {
		s = &nodeSet{pos: map[string]int{}}
		x.byClass[class] = s
	}
	return s
}

// holderOf is the node whose claim names allocation, if the cache shows one.
func (x *freeIndex) holderOf(allocation string) (*nodusv1.Node, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n, ok := x.nodes[x.holder[allocation]]
	return n, ok
}

// lookup is the node ident names: the node whose UID it is, else the one
// named so. A UID goes first, as Ironic reads a UUID (and /v1 stores an
// allocation's candidates and node as UIDs): a node may be named like
// another's UID, and must not be taken for it.
func (x *freeIndex) lookup(ident string) (*nodusv1.Node, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if n, ok := x.nodes[x.byUID[ident]]; ok {
		return n, true
	}
	n, ok := x.nodes[ident]
	return n, ok
}

// whyNoneFree is choose's lastError for a, an allocation by class, from
// every node the cache shows (the ones being claimed included), or "" when
// one of them passes every rule: such a node is being claimed, or was a
// moment ago.
func (x *freeIndex) whyNoneFree(a *nodusv1.Allocation) string {
	key := whyKey(a)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.whyGeneration != x.generation || x.whyMemo == nil {
		x.whyMemo, x.whyGeneration = map[string]string{}, x.generation
	}
	if why, ok := x.whyMemo[key]; ok {
		return why
	}
	why := whyNoneFree(a, maps.Values(x.nodes))
	x.whyMemo[key] = why
	return why
}

// whyKey is what of an allocation by class its rules read (rulesFor).
// Names hold neither separator.
func whyKey(a *nodusv1.Allocation) string {
	return a.Spec.ResourceClass + "\x00" + strings.Join(a.Spec.Traits, "\x01") + "\x00" + strings.Join(a.Spec.CandidateNodes, "\x01")
}

// sampleTries bounds the random draws before a scan of the class: with
// traits asked that few nodes have, a scan of the class finds them.
const sampleTries = 32

// take chooses a claimable node of a's class with all of a's traits —
// the node of a's Ironic name first, as Ironic, else at random — and
// takes it out of the index; nil when the class has none. skip are nodes not to try again.
func (x *freeIndex) take(a *nodusv1.Allocation, rnd *rand.Rand, skip map[string]bool) *nodusv1.Node {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.byClass[a.Spec.ResourceClass]
	if s == nil || len(s.names) == 0 {
		return nil
	}
	fits := func(name string) bool { return !skip[name] && hasAll(x.nodes[name].Spec.Traits, a.Spec.Traits) }
	pick := ""
	switch {
	case a.Spec.IronicName != "" && s.has(a.Spec.IronicName) && fits(a.Spec.IronicName):
		pick = a.Spec.IronicName
	default:
		for range min(sampleTries, len(s.names)) {
			if name := s.names[rnd.IntN(len(s.names))]; fits(name) {
				pick = name
				break
			}
		}
		if pick == "" {
			for i, start := 0, rnd.IntN(len(s.names)); i < len(s.names); i++ {
				if name := s.names[(start+i)%len(s.names)]; fits(name) {
					pick = name
					break
				}
			}
		}
	}
	if pick == "" {
		return nil
	}
	s.remove(pick)
	x.taken[pick] = 0
	return x.nodes[pick]
}

// claimed records that node's claim for allocation was written at
// resourceVersion rv: the node stays out until the cache shows that
// version, and a retry of the allocation (its status write failed) finds
// its claim before the cache does.
func (x *freeIndex) claimed(node, allocation string, rv uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.taken[node]; ok {
		x.taken[node] = rv
	}
	x.holder[allocation] = node
	delete(x.unanswered, allocation)
}

// untake gives a node back after its claim failed: the cache decides
// again whether it is claimable.
func (x *freeIndex) untake(node string) {
	x.mu.Lock()
	delete(x.taken, node)
	for allocation, n := range x.unanswered {
		if n.Name == node {
			delete(x.unanswered, allocation)
		}
	}
	n, ok := x.nodes[node]
	x.mu.Unlock()
	if ok {
		x.update(n)
	}
}

// unansweredClaim records that the claim of allocation, the write of
// claimed, got no answer; the node stays taken.
func (x *freeIndex) unansweredClaim(claimed *nodusv1.Node, allocation string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.unanswered[allocation] = claimed
}

// unansweredOf is allocation's claim that got no answer, the node as the
// claim wrote it.
func (x *freeIndex) unansweredOf(allocation string) (*nodusv1.Node, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	claimed, ok := x.unanswered[allocation]
	return claimed, ok
}

func (s *nodeSet) has(name string) bool { _, ok := s.pos[name]; return ok }

func (s *nodeSet) add(name string) {
	if s.has(name) {
		return
	}
	s.pos[name] = len(s.names)
	s.names = append(s.names, name)
}

func (s *nodeSet) remove(name string) {
	i, ok := s.pos[name]
	if !ok {
		return
	}
	last := s.names[len(s.names)-1]
	s.names[i], s.pos[last] = last, i
	s.names = s.names[:len(s.names)-1]
	delete(s.pos, name)
}

// resourceVersion is n's as a number: Nodus' store is etcd, whose
// revisions order every write.
func resourceVersion(n *nodusv1.Node) uint64 {
	rv, _ := strconv.ParseUint(n.ResourceVersion, 10, 64)
	return rv
}
