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
	view := nodeKeys(n, allocationUUID)
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

// nodeKeys are the fields of a node's view that a list filters and sorts
// by (nodeListParams, nodeSortKeys): a list builds them for every node,
// and the whole view only for the nodes of its page.
func nodeKeys(n *nodusv1.Node, allocationUUID string) map[string]interface{} {
	provision := string(n.Status.ProvisionState)
	if provision == "" {
		provision = string(nodusv1.ProvisionStateEnroll)
	}
	return map[string]interface{}{
		"uuid":               string(n.UID),
		"name":               n.Name,
		"resource_class":     orNil(n.Spec.ResourceClass),
		"maintenance":        n.Spec.Maintenance,
		"maintenance_reason": orNil(n.Spec.MaintenanceReason),
		"provision_state":    provision,
		"power_state":        nil,
		// Ironic sets it to the allocation's UUID while one holds the node.
		"instance_uuid":   orNil(allocationUUID),
		"driver":          "nodus",
		"owner":           orNil(n.Spec.Owner),
		"conductor_group": n.Spec.Pool,
		"created_at":      timestamp(n.CreationTimestamp.Time),
		"updated_at":      nil,
	}
}

// nodeSummaryFields are what a plain node list shows, as in Ironic.
var nodeSummaryFields = []string{"uuid", "name", "instance_uuid", "power_state", "provision_state", "maintenance", "links"}

// allocationView renders an Allocation; nodeUUID is its node's uid, or "".
func allocationView(base string, a *nodusv1.Allocation, nodeUUID string) map[string]interface{} {
	traits := a.Spec.Traits
	if traits == nil {
		traits = []string{}
	}
	candidates := a.Spec.CandidateNodes
	if candidates == nil {
		candidates = []string{}
	}
	state := string(a.Status.State)
	if state == "" {
		state = string(nodusv1.AllocationStateAllocating)
	}
	return map[string]interface{}{
		"uuid":            string(a.UID),
		"name":            orNil(a.Spec.IronicName),
		"node_uuid":       orNil(nodeUUID),
		"state":           state,
		"last_error":      orNil(a.Status.LastError),
		"resource_class":  orNil(a.Spec.ResourceClass),
		"traits":          traits,
		"candidate_nodes": candidates,
		"extra":           extraOf(a.Spec.Extra),
		"owner":           orNil(a.Spec.Owner),
		"created_at":      timestamp(a.CreationTimestamp.Time),
		"updated_at":      nil,
		"links":           links(base, "allocations", string(a.UID)),
	}
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
