package ironic

import "sync"

// namesByUID remembers the object name of each UID the last list of a kind
// showed, so that a read by UUID (OpenStack clients read nodes and
// allocations by UUID, one at a time) finds its object with one read
// instead of a list of the fleet: at 10,000 nodes such a list cost a GET
// of one node 15–22 ms of the server's CPU (session 51). It is a hint,
// never an answer: the object read by that name must still have the UID,
// and a UID it does not know, or one whose object is gone (or another
// object has its name now), lists the kind as before and learns the list.
//
// It holds a name per object of the kind, once /v1 looked one up by UUID
// (on a server no OpenStack client reads, nothing): a watch cache index
// would hold as much on every server, and index every write.
type namesByUID struct {
	mu    sync.Mutex
	names map[string]string
}

// name is the object name last seen for uid.
func (n *namesByUID) name(uid string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name, ok := n.names[uid]
	return name, ok
}

// learn replaces what n knows by a list's objects, each given by uidName.
func (n *namesByUID) learn(count int, uidName func(i int) (uid, name string)) {
	names := make(map[string]string, count)
	for i := range count {
		uid, name := uidName(i)
		names[uid] = name
	}
	n.mu.Lock()
	n.names = names
	n.mu.Unlock()
}
