package ironic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/nodus-dev/nodus/pkg/admission/nodeclass"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/exchange"
)

// nodeSortKeys are the columns of Ironic's node table a node shows with a
// text or boolean value (Ironic refuses its JSON columns; updated_at and
// power_state, always null here, leave the order to the UUID).
var nodeSortKeys = []string{"uuid", "name", "created_at", "updated_at", "provision_state", "power_state", "resource_class",
	"maintenance", "maintenance_reason", "instance_uuid", "driver", "conductor_group", "owner"}

func (c *call) listNodes(detail bool) error {
	q := c.req.URL.Query()
	if err := checkNodeParams(q, c.v); err != nil {
		return err
	}
	p, err := parsePage(q, nodeSortKeys, ironicNodeFields)
	if err != nil {
		return err
	}
	if err := checkFields(p.fields, ironicNodeFields, nodeFieldSince, c.v); err != nil {
		return err
	}
	if s, ok := nodeFieldSince[p.sortKey]; ok && !c.v.atLeast(s) {
		return errorf(http.StatusNotAcceptable, "Sorting by %q needs API version %s or later; this request is at %s", p.sortKey, s, c.v)
	}
	requested := len(p.fields) > 0
	if detail && len(p.fields) > 0 {
		return errorf(http.StatusBadRequest, "Can not specify ?fields on /v1/nodes/detail")
	}
	// ?detail=True (1.43+; checkNodeParams refuses it below) is the same
	// list as /v1/nodes/detail.
	if raw := q.Get("detail"); q.Has("detail") && !detail {
		asked, err := parseBool("detail", raw)
		if err != nil {
			return err
		}
		if asked && requested {
			return errorf(http.StatusBadRequest, "Can not specify ?detail=True and fields in the same request.")
		}
		detail = asked
	}
	if !detail && len(p.fields) == 0 {
		p.fields = nodeSummaryFields
	}
	nodes, err := c.nodes()
	if err != nil {
		return err
	}
	allocationUIDs, err := c.allocationUIDs()
	if err != nil {
		return err
	}
	// Filtered and sorted by their rows; only the page's views are built.
	var rows []nodeRow
	var marker row
	for i := range nodes {
		n := &nodes[i]
		r := nodeRow{n, allocationOf(n, allocationUIDs)}
		if p.marker != "" && string(n.UID) == p.marker {
			marker = r
		}
		ok, err := matchNode(q, r)
		if err != nil {
			return err
		}
		if ok {
			rows = append(rows, r)
		}
	}
	collection := "nodes"
	if detail {
		collection = "nodes/detail"
	}
	items, next, err := order(p, rows, marker, collection, c.base, q)
	if err != nil {
		return err
	}
	out := make([]map[string]interface{}, len(items))
	for i, item := range items {
		r := rows[item]
		view := atVersion(nodeView(c.base, r.n, r.allocation), nodeFieldSince, c.v)
		if requested {
			out[i] = selectRequested(view, p.fields)
		} else {
			out[i] = selectFields(view, p.fields)
		}
	}
	body := map[string]interface{}{"nodes": out}
	if next != "" {
		body["next"] = next
	}
	return c.reply(http.StatusOK, body)
}

func (c *call) showNode(ident string) error {
	// As Ironic's get_one: the node is looked up before the fields are
	// checked, so a node that does not exist is 404 whatever they are.
	n, err := c.findNode(ident)
	if err != nil {
		return err
	}
	p, err := parsePage(c.req.URL.Query(), nodeSortKeys, ironicNodeFields)
	if err != nil {
		return err
	}
	if len(p.fields) > 0 && !c.v.atLeast(fieldsSince) {
		return errorf(http.StatusNotAcceptable, "The fields parameter needs API version %s or later; this request is at %s", fieldsSince, c.v)
	}
	if err := checkFields(p.fields, ironicNodeFields, nodeFieldSince, c.v); err != nil {
		return err
	}
	view, err := c.nodeView(n)
	if err != nil {
		return err
	}
	view = atVersion(view, nodeFieldSince, c.v)
	if len(p.fields) > 0 {
		view = selectRequested(view, p.fields)
	}
	return c.reply(http.StatusOK, view)
}

func (c *call) nodeView(n *nodusv1.Node) (map[string]interface{}, error) {
	allocation, err := c.allocationUIDOf(n)
	if err != nil {
		return nil, err
	}
	return nodeView(c.base, n, allocation), nil
}

// allocationUIDOf is allocationOf node n, read by the allocation's name:
// one read, where a list of every allocation cost a node's GET 2 ms of
// the server's CPU at 1,000 allocations (session 51).
func (c *call) allocationUIDOf(n *nodusv1.Node) (string, error) {
	if n.Status.Allocation == "" {
		return "", nil
	}
	a, err := c.getAllocation(n.Status.Allocation)
	var gone *apiError
	if errors.As(err, &gone) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return allocationOf(n, map[string]string{a.Name: string(a.UID)}), nil
}

// allocationOf is the UUID of the allocation node n's claim names, by uids
// (allocationUIDs); "" when the allocation of that name is another than the
// one the claim was written for (its UID, when the claim carries one).
func allocationOf(n *nodusv1.Node, uids map[string]string) string {
	uid := uids[n.Status.Allocation]
	if n.Status.AllocationUID != "" && string(n.Status.AllocationUID) != uid {
		return ""
	}
	return uid
}

// nodePatchable are the node fields an operator may change through /v1.
var nodePatchable = map[string]bool{
	"resource_class": true, "traits": true, "maintenance": true, "maintenance_reason": true, "extra": true, "owner": true,
}

// patchNode applies an RFC 6902 JSON patch to the Ironic view of a node and
// stores the fields an operator may change.
func (c *call) patchNode(ident string) error {
	n, err := c.findNode(ident)
	if err != nil {
		return err
	}
	ops, err := c.readPatch()
	if err != nil {
		return err
	}
	for _, op := range ops {
		field := strings.SplitN(strings.TrimPrefix(op.Path, "/"), "/", 2)[0]
		if field == "name" {
			return errorf(http.StatusBadRequest, "Nodus node names are their Kubernetes object names and cannot change")
		}
		if !nodePatchable[field] {
			return errorf(http.StatusBadRequest, "Cannot patch %s: only %s may change", op.Path, "resource_class, traits, maintenance, maintenance_reason, extra and owner")
		}
		// As Ironic: a field the request's version does not show cannot
		// be changed at it either.
		if since, ok := nodeFieldSince[field]; ok && !c.v.atLeast(since) {
			return errorf(http.StatusNotAcceptable, "Patching %s needs API version %s or later; this request is at %s", field, since, c.v)
		}
	}
	// The patch applies to the node as stored at each try of the update,
	// as Ironic applies it to the node it locked: a change made meanwhile
	// (maintenance set by another call) is kept unless the patch changes
	// it too.
	obj, _, err := c.h.Nodes.Update(c.ctx(), n.Name, rest.DefaultUpdatedObjectInfo(nil,
		func(ctx context.Context, _, old runtime.Object) (runtime.Object, error) {
			cur := old.(*nodusv1.Node)
			if cur.UID != n.UID {
				return nil, errorf(http.StatusNotFound, "Node %s could not be found.", ident)
			}
			next, err := patchedNode(cur, ops)
			if err != nil {
				return nil, err
			}
			// As Ironic, which refuses it outside its undeployed states.
			if err := nodeclass.Refusal(ctx, cur, next); err != nil {
				return nil, err
			}
			return next, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	view, err := c.nodeView(obj.(*nodusv1.Node))
	if err != nil {
		return err
	}
	return c.reply(http.StatusOK, atVersion(view, nodeFieldSince, c.v))
}

// patchedNode is cur with the operator's fields of its Ironic view patched.
// The view's allocation is left out: no patch may touch it.
func patchedNode(cur *nodusv1.Node, ops []patchOp) (*nodusv1.Node, error) {
	var patched map[string]interface{}
	if err := applyPatch(nodeView("", cur, ""), ops, &patched); err != nil {
		return nil, err
	}
	var upd struct {
		ResourceClass     *string                `json:"resource_class"`
		Traits            []string               `json:"traits"`
		Maintenance       *bool                  `json:"maintenance"`
		MaintenanceReason *string                `json:"maintenance_reason"`
		Extra             map[string]interface{} `json:"extra"`
		Owner             *string                `json:"owner"`
	}
	if err := remarshal(patched, &upd); err != nil {
		return nil, err
	}
	if upd.Maintenance == nil {
		// Removed, or null: it would read as false, and take the node out
		// of maintenance unasked.
		return nil, errorf(http.StatusBadRequest, "maintenance is true or false: it cannot be removed or null")
	}
	extra, err := stringMap(upd.Extra)
	if err != nil {
		return nil, err
	}
	next := cur.DeepCopy()
	next.Spec.ResourceClass = deref(upd.ResourceClass)
	next.Spec.Traits = upd.Traits
	next.Spec.Maintenance = *upd.Maintenance
	next.Spec.MaintenanceReason = deref(upd.MaintenanceReason)
	if cur.Spec.Maintenance && !next.Spec.Maintenance {
		// Out of maintenance, its reason goes, as in Ironic. A reason set
		// on a node not in maintenance is refused below, not dropped: the
		// answer would say it was stored.
		next.Spec.MaintenanceReason = ""
	}
	next.Spec.Extra = extra
	next.Spec.Owner = deref(upd.Owner)
	return next, nil
}

// setMaintenance puts a node in maintenance (with an optional reason) or
// takes it out, answering 202 as Ironic does.
func (c *call) setMaintenance(ident string, on bool) error {
	n, err := c.findNode(ident)
	if err != nil {
		return err
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if on {
		// The body is optional; one that is sent is checked as every other.
		if data, _ := io.ReadAll(io.LimitReader(c.req.Body, maxBody)); len(strings.TrimSpace(string(data))) > 0 {
			if err := decodeStrictly(bytes.NewReader(data), &body); err != nil {
				return err
			}
		}
	}
	_, _, err = c.h.Nodes.Update(c.ctx(), n.Name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			// The node looked up, not another made under its name since.
			if old.(*nodusv1.Node).UID != n.UID {
				return nil, errorf(http.StatusNotFound, "Node %s could not be found.", ident)
			}
			next := old.(*nodusv1.Node).DeepCopy()
			next.Spec.Maintenance, next.Spec.MaintenanceReason = on, ""
			if on {
				next.Spec.MaintenanceReason = body.Reason
			}
			return next, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	return c.reply(http.StatusAccepted, nil)
}

// nodeAllocation shows or deletes the allocation of a node. An unknown
// node is a 400 for the show and a 404 for the delete, as in Ironic: its
// show looks the node up as a list filter (NodeNotFound turned into
// BAD_REQUEST in _get_allocations_collection), its delete with
// get_rpc_node_with_suffix.
func (c *call) nodeAllocation(ident string, remove bool) error {
	n, err := c.findNode(ident)
	var ae *apiError
	if !remove && errors.As(err, &ae) && ae.code == http.StatusNotFound {
		exchange.From(c.ctx()).SetFix("Name an existing node by its name or UUID: `openstack baremetal node list` lists them.")
		return errorf(http.StatusBadRequest, "Node %s could not be found.", ident)
	}
	if err != nil {
		return err
	}
	if n.Status.Allocation == "" {
		exchange.From(c.ctx()).SetFix(fmt.Sprintf("Node %s holds no allocation now; create one with `openstack baremetal allocation create --resource-class CLASS` (or --node %s to backfill it).", ident, ident))
		return errorf(http.StatusNotFound, "Allocation for node %s was not found", ident)
	}
	a, err := c.getAllocation(n.Status.Allocation)
	if err != nil {
		return err
	}
	// A claim the allocation does not stand behind (an earlier allocation's
	// of its name, or one left on this node after it settled on another)
	// is freed by the allocation controller: it answers as none, and a
	// delete never takes the allocation of another node.
	if !n.Status.ClaimedByAllocation(a) || (a.Status.Node != "" && a.Status.Node != n.Name) {
		exchange.From(c.ctx()).SetFix(fmt.Sprintf("Node %s holds no allocation now; create one with `openstack baremetal allocation create --resource-class CLASS` (or --node %s to backfill it).", ident, ident))
		return errorf(http.StatusNotFound, "Allocation for node %s was not found", ident)
	}
	if remove {
		return c.removeAllocation(a)
	}
	p, err := c.allocationPage()
	if err != nil {
		return err
	}
	return c.reply(http.StatusOK, selectFields(atVersion(allocationView(c.base, a, string(n.UID)), allocationFieldSince, c.v), p.fields))
}

// allocationUIDs maps allocation object names (what a node's status.allocation
// holds) to their uids.
func (c *call) allocationUIDs() (map[string]string, error) {
	all, err := c.allocations()
	if err != nil {
		return nil, err
	}
	uids := map[string]string{"": ""}
	for i := range all {
		uids[all[i].Name] = string(all[i].UID)
	}
	return uids, nil
}

func matches(q map[string][]string, key, value string) bool {
	want, ok := q[key]
	return !ok || want[0] == value
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
	From  string          `json:"from,omitempty"`
}

func (c *call) readPatch() ([]patchOp, error) {
	var ops []patchOp
	if err := c.decode(&ops); err != nil {
		return nil, err
	}
	if ops == nil {
		// `null`: Ironic wants a list of operations (an empty one is a
		// patch of nothing).
		return nil, errorf(http.StatusBadRequest, "Invalid input for field/attribute patch: a list of operations is required, not null")
	}
	for _, op := range ops {
		switch op.Op {
		case "add", "replace", "remove":
		default:
			return nil, errorf(http.StatusBadRequest, "Invalid patch operation %q: use add, replace or remove", op.Op)
		}
		// Ironic's JsonPatchType: its path pattern, and a value for add and
		// replace (a missing one would be applied as null, clearing the
		// field; an explicit null is a value).
		if !patchPath.MatchString(op.Path) {
			return nil, errorf(http.StatusBadRequest, "Invalid patch path %q: a path is /-separated names of letters, digits, _ and -", op.Path)
		}
		if op.Op != "remove" && op.Value == nil {
			return nil, errorf(http.StatusBadRequest, "'add' and 'replace' operations need a value")
		}
	}
	return ops, nil
}

// patchPath is the pattern of Ironic's JsonPatchType.path, `^(/[\w-]+)+$`
// (ASCII: no name of a patchable field or key needs more).
var patchPath = regexp.MustCompile(`^(/[A-Za-z0-9_-]+)+$`)

// arrayIndex is an index RFC 6901 allows into an array: no sign, no leading
// zero. json-patch v4 would take -1 as the last element and 01 as 1.
var arrayIndex = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// checkIndexes refuses an op whose path indexes an array of doc other than
// as RFC 6901 (and python-jsonpointer, which Ironic uses) allows: "-" only
// as the end of an add's path.
func checkIndexes(doc []byte, ops []patchOp) error {
	var root interface{}
	if err := json.Unmarshal(doc, &root); err != nil {
		return err
	}
	for _, op := range ops {
		segments := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		at := root
		for i, seg := range segments {
			switch v := at.(type) {
			case map[string]interface{}:
				at = v[seg]
			case []interface{}:
				last := i == len(segments)-1
				if !arrayIndex.MatchString(seg) && !(seg == "-" && last && op.Op == "add") {
					return errorf(http.StatusBadRequest, "Invalid patch path %q: %q is not an index of the list", op.Path, seg)
				}
				at = nil
				if n, err := strconv.Atoi(seg); err == nil && n < len(v) {
					at = v[n]
				}
			default:
				at = nil
			}
		}
	}
	return nil
}

func applyPatch(view map[string]interface{}, ops []patchOp, out interface{}) error {
	doc, err := json.Marshal(view)
	if err != nil {
		return err
	}
	if err := checkIndexes(doc, ops); err != nil {
		return err
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		return errorf(http.StatusBadRequest, "Invalid patch: %v", err)
	}
	patched, err := patch.Apply(doc)
	if err != nil {
		return errorf(http.StatusBadRequest, "Patch does not apply: %v", err)
	}
	if err := json.Unmarshal(patched, out); err != nil {
		return errorf(http.StatusBadRequest, "Invalid patch result: %v", err)
	}
	return nil
}

func remarshal(in, out interface{}) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return errorf(http.StatusBadRequest, "Invalid value: %v", err)
	}
	return nil
}

// stringMap converts extra to strings: Nodus keeps extra values as strings.
func stringMap(in map[string]interface{}) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		s, ok := v.(string)
		if !ok {
			return nil, errorf(http.StatusBadRequest, "extra/%s must be a string: Nodus keeps extra values as strings", k)
		}
		out[k] = s
	}
	return out, nil
}
