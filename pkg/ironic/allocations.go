package ironic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/registry/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	nodusvalidation "github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/registry/allocation"
)

var (
	// allocationSortKeys are the columns of Ironic's allocation table an
	// allocation shows with a text value (Ironic refuses its JSON columns).
	allocationSortKeys = []string{"uuid", "name", "created_at", "updated_at", "state", "last_error", "resource_class", "owner"}
	allocationFields   = keysOf(allocationView("", &nodusv1.Allocation{}, ""))
)

// allocationRequest is Ironic's POST /v1/allocations body.
type allocationRequest struct {
	Name           *string                `json:"name"`
	UUID           *string                `json:"uuid"`
	ResourceClass  *string                `json:"resource_class"`
	Traits         []string               `json:"traits"`
	CandidateNodes []string               `json:"candidate_nodes"`
	Extra          map[string]interface{} `json:"extra"`
	Node           *string                `json:"node"`
	// Owner is raw: Ironic refuses the key itself below 1.60, even as null.
	Owner json.RawMessage `json:"owner"`
}

func (c *call) createAllocation() error {
	var body allocationRequest
	if err := c.decode(&body); err != nil {
		return err
	}
	if body.Owner != nil && !c.v.atLeast(ownerSince) {
		exchange.From(c.ctx()).SetFix(fmt.Sprintf("Send %s: %s or later with an owner, or leave owner out.", headerVersion, ownerSince))
		return errorf(http.StatusNotAcceptable, "owner needs API version %s or later", ownerSince)
	}
	var owner *string
	if body.Owner != nil {
		if err := json.Unmarshal(body.Owner, &owner); err != nil {
			return errorf(http.StatusBadRequest, "Invalid request body: owner must be a string or null")
		}
	}
	ctx := c.ctx()
	if uuid := deref(body.UUID); uuid != "" {
		// As Ironic's args.uuid (is_uuid_like); the UUID is kept in its
		// canonical form.
		uid, ok := canonicalUUID(uuid)
		if !ok {
			exchange.From(ctx).SetFix("Send uuid as a UUID (8-4-4-4-12 hexadecimal digits), or leave it out to get a new one.")
			return errorf(http.StatusBadRequest, "Expected UUID for uuid: %s", uuid)
		}
		ctx = allocation.WithUID(ctx, uid)
	}
	name := deref(body.Name)
	switch {
	case name != "" && !isValidLogicalName(name):
		exchange.From(ctx).SetFix("An allocation name is 1 to 255 of A-Z a-z 0-9 - . _ ~.")
		return errorf(http.StatusBadRequest, "Cannot create allocation with invalid name '%s'", name)
	case body.Node != nil && !c.v.atLeast(backfillSince):
		return errorf(http.StatusBadRequest, "node (backfilling) needs API version %s or later", backfillSince)
	case deref(body.ResourceClass) == "" && deref(body.Node) == "":
		return errorf(http.StatusBadRequest, "resource_class is required unless node is given")
	}
	extra, err := stringMap(body.Extra)
	if err != nil {
		return err
	}
	a := &nodusv1.Allocation{Spec: nodusv1.AllocationSpec{
		IronicName: name, ResourceClass: deref(body.ResourceClass), Traits: body.Traits, CandidateNodes: body.CandidateNodes,
		Extra: extra, Owner: deref(owner),
	}}
	if body.Node != nil {
		n, err := c.findNamedNode(*body.Node, "Node %s could not be found")
		if err != nil {
			return err
		}
		// Its UID, as the candidates: the controller looks an ident up as
		// a UID first, and a node may be named like another's UID.
		a.Spec.Node = string(n.UID)
		if a.Spec.ResourceClass == "" {
			a.Spec.ResourceClass = n.Spec.ResourceClass // as Ironic, when backfilling
		}
	}
	// Each candidate is a read: bounded before they are looked up.
	if len(a.Spec.CandidateNodes) > nodusvalidation.MaxCandidates {
		exchange.From(ctx).SetFix(fmt.Sprintf("Name at most %d candidate nodes, or leave candidate_nodes out to choose among every node of the resource class.", nodusvalidation.MaxCandidates))
		return errorf(http.StatusBadRequest, "candidate_nodes names %d candidate nodes; at most %d are accepted", len(a.Spec.CandidateNodes), nodusvalidation.MaxCandidates)
	}
	// As Ironic: candidates are resolved to UUIDs now, in their order, and
	// one that names no node is a 400. A node named twice (by name and by
	// UUID) is one candidate.
	resolved := make([]string, 0, len(a.Spec.CandidateNodes))
	for _, ident := range a.Spec.CandidateNodes {
		n, err := c.findNamedNode(ident, "Node %s could not be found.")
		if err != nil {
			return err
		}
		if !slices.Contains(resolved, string(n.UID)) {
			resolved = append(resolved, string(n.UID))
		}
	}
	if a.Spec.CandidateNodes != nil {
		a.Spec.CandidateNodes = resolved
	}
	// The object name is the Ironic name where that is a valid object
	// name and free; otherwise (and for an unnamed allocation) a generated
	// one. Uniqueness of the Ironic name is the registry's claim, not the
	// object name's.
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		a.Name = name
	} else {
		a.GenerateName = "allocation-"
	}
	obj, err := c.h.Allocations.Create(ctx, a.DeepCopy(), rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) && a.Name != "" {
		// The object name is another allocation's: one renamed away from
		// this name, or one that has it, whose claim refuses the retry.
		a.Name, a.GenerateName = "", "allocation-"
		obj, err = c.h.Allocations.Create(ctx, a, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	created := obj.(*nodusv1.Allocation)
	c.w.Header().Set("Location", c.base+"/v1/allocations/"+string(created.UID))
	return c.reply(http.StatusCreated, atVersion(allocationView(c.base, created, ""), allocationFieldSince, c.v))
}

// allocationListParams are the query parameters Ironic's allocation list
// takes (AllocationsController.get_all); any other is 400, as there.
var allocationListParams = map[string]bool{
	"node": true, "resource_class": true, "state": true, "owner": true,
	"limit": true, "marker": true, "sort_key": true, "sort_dir": true, "fields": true,
}

func (c *call) listAllocations() error {
	q := c.req.URL.Query()
	for name := range q {
		if !allocationListParams[name] {
			return errorf(http.StatusBadRequest, "Unknown argument: %q", name)
		}
	}
	p, err := c.allocationPage()
	if err != nil {
		return err
	}
	if q.Has("owner") && !c.v.atLeast(ownerSince) {
		return errorf(http.StatusNotAcceptable, "Filtering by owner needs API version %s or later", ownerSince)
	}
	nodeFilter := ""
	if ident := q.Get("node"); ident != "" {
		n, err := c.findNamedNode(ident, "Node %s could not be found")
		if err != nil {
			return err
		}
		nodeFilter = n.Name
	}
	listed, err := c.h.Allocations.List(c.ctx(), consistent)
	if err != nil {
		return err
	}
	all := listed.(*nodusv1.AllocationList)
	// Every allocation is filtered and sorted by its row, without its
	// node's UUID, which no filter or sort key reads; the page's views
	// read their nodes, one each, instead of a list of the fleet per page.
	var rows []allocationRow
	var marker row
	for i := range all.Items {
		a := &all.Items[i]
		if p.marker != "" && string(a.UID) == p.marker {
			marker = allocationRow{a}
		}
		if nodeFilter != "" && a.Status.Node != nodeFilter {
			continue
		}
		if !matches(q, "resource_class", a.Spec.ResourceClass) || !matches(q, "owner", a.Spec.Owner) ||
			!matches(q, "state", stateOf(a)) {
			continue
		}
		rows = append(rows, allocationRow{a})
	}
	items, next, err := order(p, rows, marker, "allocations", c.base, q)
	if err != nil {
		return err
	}
	out := make([]map[string]interface{}, len(items))
	for i, item := range items {
		// As of the list's revision or later: the node named is the one
		// the allocation holds at that revision, or its successor.
		view, err := c.allocationViewAt(rows[item].a, all.ResourceVersion)
		if err != nil {
			return err
		}
		out[i] = selectFields(view, p.fields)
	}
	body := map[string]interface{}{"allocations": out}
	if next != "" {
		body["next"] = next
	}
	return c.reply(http.StatusOK, body)
}

// allocationPage reads the paging and fields of an allocation read, with
// a field of a later microversion than the request's refused (406), as for
// nodes: to ask for owner, or sort by it, below 1.60 is not to get it.
func (c *call) allocationPage() (page, error) {
	p, err := parsePage(c.req.URL.Query(), allocationSortKeys, allocationFields)
	if err != nil {
		return p, err
	}
	if err := checkFields(p.fields, allocationFields, allocationFieldSince, c.v); err != nil {
		return p, err
	}
	if s, ok := allocationFieldSince[p.sortKey]; ok && !c.v.atLeast(s) {
		return p, errorf(http.StatusNotAcceptable, "Sorting by %q needs API version %s or later; this request is at %s", p.sortKey, s, c.v)
	}
	return p, nil
}

func stateOf(a *nodusv1.Allocation) string {
	if a.Status.State == "" {
		return string(nodusv1.AllocationStateAllocating)
	}
	return string(a.Status.State)
}

func (c *call) showAllocation(ident string) error {
	p, err := c.allocationPage()
	if err != nil {
		return err
	}
	a, err := c.findAllocation(ident)
	if err != nil {
		return err
	}
	view, err := c.allocationView(a)
	if err != nil {
		return err
	}
	return c.reply(http.StatusOK, selectFields(view, p.fields))
}

func (c *call) allocationView(a *nodusv1.Allocation) (map[string]interface{}, error) {
	return c.allocationViewAt(a, "")
}

// allocationViewAt is a's view with its node's UUID read at resourceVersion
// or later from the watch cache ("" reads etcd now).
func (c *call) allocationViewAt(a *nodusv1.Allocation, resourceVersion string) (map[string]interface{}, error) {
	nodeUID := ""
	if a.Status.Node != "" {
		// By its object name: findNode would take a name that looks like a
		// UUID for another node's UUID.
		obj, err := c.h.Nodes.Get(c.ctx(), a.Status.Node, &metav1.GetOptions{ResourceVersion: resourceVersion})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
		if err == nil {
			nodeUID = string(obj.(*nodusv1.Node).UID)
		}
	}
	return atVersion(allocationView(c.base, a, nodeUID), allocationFieldSince, c.v), nil
}

// allocationPatchable are the fields Ironic's allocation PATCH may change
// (PATCH_ALLOWED_FIELDS).
var allocationPatchable = []string{"name", "extra"}

// patchAllocation changes name and extra (1.57+), as Ironic's PATCH. A new
// name is claimed by the registry before it is written, so a rename never
// leaves two allocations with one name.
func (c *call) patchAllocation(ident string) error {
	a, err := c.findAllocation(ident)
	if err != nil {
		return err
	}
	ops, err := c.readPatch()
	if err != nil {
		return err
	}
	for _, op := range ops {
		field := strings.SplitN(strings.TrimPrefix(op.Path, "/"), "/", 2)[0]
		if !slices.Contains(allocationPatchable, field) {
			return errorf(http.StatusBadRequest, "Cannot patch %s. Only the following can be updated: %s", op.Path, strings.Join(allocationPatchable, ", "))
		}
		if op.Path != "/name" || op.Op == "remove" {
			continue
		}
		// As Ironic: each new name (not null) must be a logical name.
		var name *string
		if json.Unmarshal(op.Value, &name) != nil || (name != nil && *name != "" && !isValidLogicalName(*name)) {
			exchange.From(c.ctx()).SetFix("An allocation name is 1 to 255 of A-Z a-z 0-9 - . _ ~; remove /name (or set it to null) to leave the allocation unnamed.")
			return errorf(http.StatusBadRequest, "Cannot update allocation with invalid name '%s'", strings.Trim(string(op.Value), `"`))
		}
	}
	// The patch applies to the allocation as stored at each try of the
	// update: a change made meanwhile is kept unless the patch changes it.
	obj, _, err := c.h.Allocations.Update(c.ctx(), a.Name, rest.DefaultUpdatedObjectInfo(nil,
		func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
			cur := old.(*nodusv1.Allocation)
			if cur.UID != a.UID {
				return nil, errorf(http.StatusNotFound, "Allocation %s could not be found.", ident)
			}
			var patched struct {
				Name  *string                `json:"name"`
				Extra map[string]interface{} `json:"extra"`
			}
			if err := applyPatch(allocationView("", cur, ""), ops, &patched); err != nil {
				return nil, err
			}
			extra, err := stringMap(patched.Extra)
			if err != nil {
				return nil, err
			}
			next := cur.DeepCopy()
			next.Spec.IronicName = deref(patched.Name)
			next.Spec.Extra = extra
			return next, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	view, err := c.allocationView(obj.(*nodusv1.Allocation))
	if err != nil {
		return err
	}
	return c.reply(http.StatusOK, view)
}

func (c *call) deleteAllocation(ident string) error {
	a, err := c.findAllocation(ident)
	if err != nil {
		return err
	}
	return c.removeAllocation(a)
}

// removeAllocation deletes with the Ironic rule: 409 while the node is
// active and not in maintenance.
func (c *call) removeAllocation(a *nodusv1.Allocation) error {
	// This allocation, not one made since under its name.
	_, _, err := c.h.Allocations.Delete(c.ctx(), a.Name, rest.ValidateAllObjectFunc, metav1.NewPreconditionDeleteOptions(string(a.UID)))
	if apierrors.IsConflict(err) {
		// The precondition's conflict, or the Ironic rule's: an object of
		// another UID under the name is the precondition's.
		if now, getErr := c.h.Allocations.Get(c.ctx(), a.Name, &metav1.GetOptions{}); apierrors.IsNotFound(getErr) ||
			(getErr == nil && now.(*nodusv1.Allocation).UID != a.UID) {
			return errorf(http.StatusNotFound, "Allocation %s could not be found.", a.UID)
		}
	}
	if err != nil {
		return err
	}
	return c.reply(http.StatusNoContent, nil)
}
