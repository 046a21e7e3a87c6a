package ironic

import (
	"time"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// link is Ironic's resource link.
type link struct {
	Href string `json:"href"`
	Rel  string `json:"rel"`
}

func links(base, collection, id string) []link {
	return []link{{Href: base + "/v1/" + collection + "/" + id, Rel: "self"}, {Href: base + "/" + collection + "/" + id, Rel: "bookmark"}}
}

func timestamp(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format("2006-01-02T15:04:05+00:00")
	return &s
}

func orNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func extraOf(m map[string]string) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// nodeView renders a Node as Ironic does; allocationUUID is its
// allocation's uid, or "".
func nodeView(base string, n *nodusv1.Node, allocationUUID string) map[string]interface{} {
	view := viewOf(nodeRow{n, allocationUUID}, nodeRowFields, 5)
	traits := n.Spec.Traits
	if traits == nil {
		traits = []string{}
	}
	inv := n.Status.Inventory
	view["traits"] = traits
	view["extra"] = extraOf(n.Spec.Extra)
	view["allocation_uuid"] = orNil(allocationUUID)
	view["properties"] = map[string]interface{}{
		"cpus": inv.CPU, "memory_mb": inv.MemoryMiB, "local_gb": inv.DiskGiB,
	}
	view["links"] = links(base, "nodes", string(n.UID))
	return view
}

// row is one item of a list as the list's filters and sort read it: the
// value its view shows for a field.
type row interface {
	field(name string) interface{}
}

// viewOf starts an item's view with its row's fields, with room for more.
func viewOf[R row](r R, fields []string, more int) map[string]interface{} {
	view := make(map[string]interface{}, len(fields)+more)
	for _, f := range fields {
		view[f] = r.field(f)
	}
	return view
}

// nodeRowFields are the fields of a node's view that a list filters and
// sorts by (nodeListParams, nodeSortKeys).
var nodeRowFields = []string{"uuid", "name", "resource_class", "maintenance", "maintenance_reason", "provision_state",
	"power_state", "instance_uuid", "driver", "owner", "conductor_group", "created_at", "updated_at"}

// nodeRow is a node as a list filters and sorts it, each field read from
// the node when asked: a list reads every node for each page, and a map
// of these fields per node was 27 % of a page's CPU at 10,000 nodes, and
// garbage for the collector besides (docs/performance.md, sessions 53 and
// 54).
// allocation is the node's allocation's uid, or "".
type nodeRow struct {
	n          *nodusv1.Node
	allocation string
}

func (r nodeRow) field(name string) interface{} {
	n := r.n
	switch name {
	case "uuid":
		return string(n.UID)
	case "name":
		return n.Name
	case "resource_class":
		return orNil(n.Spec.ResourceClass)
	case "maintenance":
		return n.Spec.Maintenance
	case "maintenance_reason":
		return orNil(n.Spec.MaintenanceReason)
	case "provision_state":
		if n.Status.ProvisionState == "" {
			return string(nodusv1.ProvisionStateEnroll)
		}
		return string(n.Status.ProvisionState)
	case "instance_uuid":
		// Ironic sets it to the allocation's UUID while one holds the node.
		return orNil(r.allocation)
	case "driver":
		return "nodus"
	case "owner":
		return orNil(n.Spec.Owner)
	case "conductor_group":
		return n.Spec.Pool
	case "created_at":
		return timestamp(n.CreationTimestamp.Time)
	}
	// power_state and updated_at, which Nodus does not keep, are null.
	return nil
}

// nodeSummaryFields are what a plain node list shows, as in Ironic.
var nodeSummaryFields = []string{"uuid", "name", "instance_uuid", "power_state", "provision_state", "maintenance", "links"}

// allocationView renders an Allocation; nodeUUID is its node's uid, or "".
func allocationView(base string, a *nodusv1.Allocation, nodeUUID string) map[string]interface{} {
	view := viewOf(allocationRow{a}, allocationRowFields, 5)
	traits := a.Spec.Traits
	if traits == nil {
		traits = []string{}
	}
	candidates := a.Spec.CandidateNodes
	if candidates == nil {
		candidates = []string{}
	}
	view["node_uuid"] = orNil(nodeUUID)
	view["traits"] = traits
	view["candidate_nodes"] = candidates
	view["extra"] = extraOf(a.Spec.Extra)
	view["links"] = links(base, "allocations", string(a.UID))
	return view
}

// allocationRowFields are the fields of an allocation's view that a list
// sorts by (allocationSortKeys; its filters read the Allocation).
var allocationRowFields = []string{"uuid", "name", "state", "last_error", "resource_class", "owner", "created_at", "updated_at"}

// allocationRow is an allocation as a list sorts it, each field read from
// the allocation when asked: a list reads every allocation for each page,
// and built each one's whole view to sort it.
type allocationRow struct{ a *nodusv1.Allocation }

func (r allocationRow) field(name string) interface{} {
	a := r.a
	switch name {
	case "uuid":
		return string(a.UID)
	case "name":
		return orNil(a.Spec.IronicName)
	case "state":
		return stateOf(a)
	case "last_error":
		return orNil(a.Status.LastError)
	case "resource_class":
		return orNil(a.Spec.ResourceClass)
	case "owner":
		return orNil(a.Spec.Owner)
	case "created_at":
		return timestamp(a.CreationTimestamp.Time)
	}
	// updated_at, which Nodus does not keep, is null.
	return nil
}

// selectFields keeps only fields (Ironic's ?fields=a,b), links always.
// selectRequested is selectFields for the fields a client asked for: one
// Nodus has no value for is null, as Ironic shows an unset field.
func selectRequested(view map[string]interface{}, fields []string) map[string]interface{} {
	out := selectFields(view, fields)
	for _, f := range fields {
		if _, ok := out[f]; !ok {
			out[f] = nil
		}
	}
	return out
}

func selectFields(view map[string]interface{}, fields []string) map[string]interface{} {
	if len(fields) == 0 {
		return view
	}
	out := map[string]interface{}{"links": view["links"]}
	for _, f := range fields {
		if v, ok := view[f]; ok {
			out[f] = v
		}
	}
	return out
}
