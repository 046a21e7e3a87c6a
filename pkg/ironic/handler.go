package ironic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/audit"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	nodusvalidation "github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/exchange"
	"github.com/nodus-dev/nodus/pkg/registry/allocation"
)

// Handler serves /v1 over the server's stores.
type Handler struct {
	Nodes *genericregistry.Store // nodes
	// Allocations is the allocations' REST storage: its writes keep Ironic
	// names and UUIDs unique, its deletes follow Ironic's rule (409 for
	// active nodes).
	Allocations *allocation.REST

	// nodeNames and allocationNames find an object read by UUID with one
	// read, most times.
	nodeNames, allocationNames namesByUID
}

// apiError is an error with its Ironic status code.
type apiError struct {
	code int
	msg  string
	// allow, for a 405, are the methods the resource allows (the Allow header).
	allow []string
}

// notAllowed is the 405 for method on a resource that allows allow.
func notAllowed(method, resource string, allow ...string) *apiError {
	slices.Sort(allow)
	return &apiError{code: http.StatusMethodNotAllowed, msg: fmt.Sprintf("The method %s is not allowed for %s", method, resource), allow: allow}
}

func (e *apiError) Error() string { return e.msg }

func errorf(code int, format string, args ...interface{}) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// maxBody bounds a request body of the Ironic API.
const maxBody = 64 << 10

// AuditAnnotation is the audit annotation that keeps a write's body.
const AuditAnnotation = "nodus.dev/ironic-request"

// ServeHTTP routes /v1 requests.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ex := exchange.From(req.Context())
	setRequestID(w.Header(), ex.RequestID())
	v, err := negotiate(req)
	if err != nil {
		ex.SetFix(fmt.Sprintf("Send %s: a version from %s to %s, or latest (gophercloud: client.Microversion).", headerVersion, minVersion, maxVersion))
		h.fail(w, req, &apiError{code: http.StatusNotAcceptable, msg: err.Error()})
		return
	}
	setVersionHeaders(w.Header(), &v)
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		// Writes are audited with their body, as API writes are; Ironic's
		// bodies are small documents.
		body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
		switch {
		case err != nil:
			h.fail(w, req, errorf(http.StatusBadRequest, "the request body cannot be read: %v", err))
			return
		case len(body) > maxBody:
			h.fail(w, req, &apiError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("the request body takes at most %d bytes", maxBody)})
			return
		}
		audit.AddAuditAnnotation(req.Context(), AuditAnnotation, auditBody(body))
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	c := &call{h: h, w: w, req: req, v: v, base: baseURL(req)}
	if err := c.route(); err != nil {
		h.fail(w, req, err)
	}
}

// fail hands an error to the envelope, which writes it in Ironic's format.
func (h *Handler) fail(w http.ResponseWriter, req *http.Request, err error) {
	ex := exchange.From(req.Context())
	var ae *apiError
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &ae):
		if ae.code == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", strings.Join(ae.allow, ", "))
		}
		ironicRefusal(ex, ae.code, "")
		http.Error(w, ae.msg, ae.code)
	case errors.As(err, &status):
		s := status.Status()
		code := int(s.Code)
		switch code {
		case 0:
			code = http.StatusInternalServerError
		case http.StatusUnprocessableEntity:
			// Ironic reports invalid values as 400, and a 400's reason is
			// BadRequest, whose docs name that code; the causes stay.
			code, s.Reason = http.StatusBadRequest, metav1.StatusReasonBadRequest
		}
		s.Code = int32(code)
		ironicRefusal(ex, code, s.Reason)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		s.Kind, s.APIVersion = "Status", "v1"
		_ = json.NewEncoder(w).Encode(s)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// ironicRefusal gives a refusal of /v1 with code, and reason where it has
// one, the registered reason and fix an Ironic client needs, where the
// handler set none: a 406 is a microversion's (not a media type's), and
// the fixes of the generic 400, 404, 405 and 413 name Ironic's requests,
// not kubectl. A refusal of a reason of its own (NodeActive, …) keeps the
// fix registered with it.
func ironicRefusal(ex *exchange.Exchange, code int, reason metav1.StatusReason) {
	if code == http.StatusNotAcceptable {
		ex.SetReason(string(apierror.ReasonMicroversionNotSupported))
	}
	switch reason {
	case "", metav1.StatusReasonBadRequest, metav1.StatusReasonNotFound, metav1.StatusReasonMethodNotAllowed, metav1.StatusReasonRequestEntityTooLarge:
	default:
		return
	}
	if ex.Fix() != "" {
		return
	}
	switch code {
	case http.StatusBadRequest:
		ex.SetFix("Correct what the message names and send the request again: /v1 takes the fields, filters and patch paths of Ironic's API at the request's microversion (docs/ironic.md lists them).")
	case http.StatusNotFound:
		ex.SetFix(fmt.Sprintf("List what exists (openstack baremetal node list, openstack baremetal allocation list): a node is found by its UUID, or its name from microversion %s on; allocations are served from %s on.", nodeNamesSince, allocationsSince))
	case http.StatusMethodNotAllowed:
		ex.SetFix(fmt.Sprintf("Use a method the Allow header lists for this path; allocations are written from microversion %s on (%s).", allocationsSince, headerVersion))
	case http.StatusNotAcceptable:
		ex.SetFix(fmt.Sprintf("What the message names needs a later microversion: send %s: %s (or latest), or leave it out.", headerVersion, maxVersion))
	case http.StatusRequestEntityTooLarge:
		ex.SetFix(fmt.Sprintf("Send a body of at most %d KiB: /v1 writes are small documents (a node's or an allocation's extra holds %d KiB in all).", maxBody>>10, nodusvalidation.MaxExtraBytes>>10))
	}
}

// call is one request.
type call struct {
	h    *Handler
	w    http.ResponseWriter
	req  *http.Request
	v    version
	base string
}

// ctx is the request's context, marked cluster-scoped for the stores.
func (c *call) ctx() context.Context {
	return genericapirequest.WithNamespace(c.req.Context(), metav1.NamespaceNone)
}

func (c *call) route() error {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(c.req.URL.Path, Prefix), "/"), "/")
	if parts[0] == "" {
		parts = nil
	}
	method := c.req.Method
	if method == http.MethodHead {
		// A GET without its body, as Ironic's web framework answers HEAD;
		// the response writer drops the body.
		method = http.MethodGet
	}
	switch {
	case len(parts) == 0 && method == http.MethodGet:
		return c.versionDocument()
	case len(parts) >= 1 && parts[0] == "nodes":
		return c.routeNodes(method, parts[1:])
	case len(parts) >= 1 && parts[0] == "allocations":
		if !c.v.atLeast(allocationsSince) {
			exchange.From(c.ctx()).SetFix(fmt.Sprintf("Allocations need API version %s or later: send %s: %s (or latest).", allocationsSince, headerVersion, maxVersion))
			// As Ironic: reads are not found, writes not allowed.
			if method == http.MethodGet {
				return errorf(http.StatusNotFound, "The resource could not be found.")
			}
			return &apiError{code: http.StatusMethodNotAllowed, msg: "The API version does not allow allocations", allow: []string{}}
		}
		return c.routeAllocations(method, parts[1:])
	case len(parts) == 0:
		return notAllowed(method, "/v1", http.MethodGet, http.MethodHead)
	}
	return errorf(http.StatusNotFound, "The resource could not be found.")
}

func (c *call) routeNodes(method string, rest []string) error {
	// As Ironic's node controller, before anything is looked up: the node
	// must be named by a UUID or a logical name (its _lookup checks the
	// ident of a subresource, get_one and patch their node_ident).
	argument := ""
	switch {
	case len(rest) == 2:
		argument = "node"
	case len(rest) == 1 && rest[0] != "detail" && (method == http.MethodGet || method == http.MethodPatch):
		argument = "node_ident"
	}
	if argument != "" && !isValidLogicalName(rest[0]) && !isUUIDLike(rest[0]) {
		exchange.From(c.ctx()).SetFix("Name the node by its UUID or its name (A-Z a-z 0-9 - . _ ~): `openstack baremetal node list` shows both.")
		return errorf(http.StatusBadRequest, "Expected UUID or name for %s: %s", argument, rest[0])
	}
	switch {
	case len(rest) == 0 && method == http.MethodGet:
		return c.listNodes(false)
	case len(rest) == 1 && rest[0] == "detail" && method == http.MethodGet:
		return c.listNodes(true)
	case len(rest) == 1 && method == http.MethodGet:
		return c.showNode(rest[0])
	case len(rest) == 1 && method == http.MethodPatch:
		return c.patchNode(rest[0])
	case len(rest) == 2 && rest[1] == "maintenance" && (method == http.MethodPut || method == http.MethodDelete):
		return c.setMaintenance(rest[0], method == http.MethodPut)
	case len(rest) == 2 && rest[1] == "allocation" && c.v.atLeast(allocationsSince) && method == http.MethodGet:
		return c.nodeAllocation(rest[0], false)
	case len(rest) == 2 && rest[1] == "allocation" && c.v.atLeast(allocationsSince) && method == http.MethodDelete:
		return c.nodeAllocation(rest[0], true)
	case len(rest) == 0 || (len(rest) == 1 && rest[0] == "detail"):
		return notAllowed(method, "this resource", http.MethodGet, http.MethodHead)
	case len(rest) == 1:
		return notAllowed(method, "this resource", http.MethodGet, http.MethodHead, http.MethodPatch)
	case len(rest) == 2 && rest[1] == "maintenance":
		return notAllowed(method, "this resource", http.MethodPut, http.MethodDelete)
	case len(rest) == 2 && rest[1] == "allocation" && c.v.atLeast(allocationsSince):
		return notAllowed(method, "this resource", http.MethodGet, http.MethodHead, http.MethodDelete)
	}
	return errorf(http.StatusNotFound, "The resource could not be found.")
}

func (c *call) routeAllocations(method string, rest []string) error {
	switch {
	case len(rest) == 0 && method == http.MethodGet:
		return c.listAllocations()
	case len(rest) == 0 && method == http.MethodPost:
		return c.createAllocation()
	case len(rest) == 1 && method == http.MethodGet:
		return c.showAllocation(rest[0])
	case len(rest) == 1 && method == http.MethodPatch && c.v.atLeast(patchAllocSince):
		return c.patchAllocation(rest[0])
	case len(rest) == 1 && method == http.MethodDelete:
		return c.deleteAllocation(rest[0])
	case len(rest) == 0:
		return notAllowed(method, "this resource", http.MethodGet, http.MethodHead, http.MethodPost)
	case len(rest) == 1 && c.v.atLeast(patchAllocSince):
		return notAllowed(method, "this resource", http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodPatch)
	case len(rest) == 1:
		return notAllowed(method, "this resource", http.MethodGet, http.MethodHead, http.MethodDelete)
	}
	return errorf(http.StatusNotFound, "The resource could not be found.")
}

func (c *call) versionDocument() error {
	doc := map[string]interface{}{
		"id":          "v1",
		"links":       []link{{Href: c.base + "/v1/", Rel: "self"}},
		"media_types": []map[string]string{{"base": "application/json", "type": "application/vnd.openstack.ironic.v1+json"}},
		"version":     v1Version(c.base),
		"nodes":       []link{{Href: c.base + "/v1/nodes/", Rel: "self"}, {Href: c.base + "/nodes/", Rel: "bookmark"}},
	}
	if c.v.atLeast(allocationsSince) {
		doc["allocations"] = []link{{Href: c.base + "/v1/allocations/", Rel: "self"}, {Href: c.base + "/allocations/", Rel: "bookmark"}}
	}
	return c.reply(http.StatusOK, doc)
}

func (c *call) reply(code int, body interface{}) error {
	if body == nil {
		// No body, and no JSON type promising one: Ironic's clients
		// decode a JSON-typed answer.
		c.w.WriteHeader(code)
		return nil
	}
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(code)
	return json.NewEncoder(c.w).Encode(body)
}

// decode reads a JSON body into v, refusing unknown fields.
func (c *call) decode(v interface{}) error {
	return decodeStrictly(io.LimitReader(c.req.Body, maxBody), v)
}

// decodeStrictly decodes the one JSON document of r into v, refusing
// unknown fields.
func decodeStrictly(r io.Reader, v interface{}) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, "Invalid request body: %v", err)
	}
	// One document, as Ironic's JSON parser takes: whatever follows it
	// would otherwise be dropped unseen.
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, "Invalid request body: something follows the JSON document")
	}
	return nil
}

// fromCache lists what the watch cache has; consistent lists what etcd has
// now (the library serves it from the watch cache once that has caught up
// with etcd's current revision, which costs one small etcd read).
var (
	fromCache  = &metainternalversion.ListOptions{ResourceVersion: "0"}
	consistent = &metainternalversion.ListOptions{}
)

// nodes lists every node, consistently: an Ironic client reads its own
// writes, as it does from Ironic's database.
func (c *call) nodes() ([]nodusv1.Node, error) { return c.listNodesWith(consistent) }

func (c *call) listNodesWith(opts *metainternalversion.ListOptions) ([]nodusv1.Node, error) {
	obj, err := c.h.Nodes.List(c.ctx(), opts)
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.NodeList).Items, nil
}

// allocations lists every allocation, consistently, as nodes does.
func (c *call) allocations() ([]nodusv1.Allocation, error) { return c.listAllocationsWith(consistent) }

func (c *call) listAllocationsWith(opts *metainternalversion.ListOptions) ([]nodusv1.Allocation, error) {
	obj, err := c.h.Allocations.List(c.ctx(), opts)
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.AllocationList).Items, nil
}

// findNode resolves a node by UUID or name, with a consistent read.
func (c *call) findNode(ident string) (*nodusv1.Node, error) {
	uid, isUUID := canonicalUUID(ident)
	if !isUUID && !c.v.atLeast(nodeNamesSince) {
		// As Ironic's get_rpc_node: before 1.5 a node has no name to be found by.
		return nil, errorf(http.StatusNotFound, "Node %s could not be found.", ident)
	}
	if !isUUID && (ident == "." || ident == "..") {
		// Logical names, but no object's: the store would refuse them as
		// a path's.
		return nil, errorf(http.StatusNotFound, "Node %s could not be found.", ident)
	}
	if !isUUID {
		obj, err := c.h.Nodes.Get(c.ctx(), ident, &metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, errorf(http.StatusNotFound, "Node %s could not be found.", ident)
		}
		if err != nil {
			return nil, err
		}
		return obj.(*nodusv1.Node), nil
	}
	// The name this server last saw with the UID first (one read); then
	// the watch cache's list, then etcd's: a node made a moment ago may not
	// be in the cache yet. Each list is learnt for the next lookups.
	if name, ok := c.h.nodeNames.name(uid); ok {
		if n, err := c.nodeOfUID(name, uid); n != nil || err != nil {
			return n, err
		}
	}
	for _, opts := range []*metainternalversion.ListOptions{fromCache, consistent} {
		nodes, err := c.listNodesWith(opts)
		if err != nil {
			return nil, err
		}
		c.h.nodeNames.learn(len(nodes), func(i int) (string, string) { return string(nodes[i].UID), nodes[i].Name })
		for i := range nodes {
			if string(nodes[i].UID) != uid {
				continue
			}
			if n, err := c.nodeOfUID(nodes[i].Name, uid); n != nil || err != nil {
				return n, err
			}
			break // gone, or its name is another node's now: ask etcd
		}
	}
	return nil, errorf(http.StatusNotFound, "Node %s could not be found.", ident)
}

// nodeOfUID reads the node of that object name, never by findNode again
// (a name may look like a UUID, another node's); nil when it is gone or
// is another node now.
func (c *call) nodeOfUID(name, uid string) (*nodusv1.Node, error) {
	obj, err := c.h.Nodes.Get(c.ctx(), name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if n := obj.(*nodusv1.Node); string(n.UID) == uid {
		return n, nil
	}
	return nil, nil
}

// findNamedNode is findNode for a node a request's body or query names:
// one that does not exist is the request's fault, a 400 with message (as
// Ironic's); a failure to look stays what it is.
func (c *call) findNamedNode(ident, message string) (*nodusv1.Node, error) {
	if !isUUIDLike(ident) && !isValidLogicalName(ident) {
		// As Ironic's get_rpc_node (InvalidUuidOrName): a path's ident is
		// checked as the route's; one in a body or query is checked here.
		return nil, errorf(http.StatusBadRequest, "Expected a logical name or UUID but received %s.", ident)
	}
	n, err := c.findNode(ident)
	var e *apiError
	if errors.As(err, &e) && e.code == http.StatusNotFound {
		return nil, errorf(http.StatusBadRequest, message, ident)
	}
	return n, err
}

// findAllocation resolves an allocation as Ironic's get_rpc_allocation
// does: a UUID, else an Ironic name (spec.ironicName), else a 400.
func (c *call) findAllocation(ident string) (*nodusv1.Allocation, error) {
	if uid, isUUID := canonicalUUID(ident); isUUID {
		// The name this server last saw with the UID first, as findNode.
		if name, ok := c.h.allocationNames.name(uid); ok {
			a, err := c.getAllocation(name)
			var gone *apiError
			if err != nil && !errors.As(err, &gone) {
				return nil, err
			}
			if err == nil && string(a.UID) == uid {
				return a, nil
			}
		}
		return c.findAllocationBy(ident, func(a *nodusv1.Allocation) bool { return string(a.UID) == uid })
	}
	if !isValidLogicalName(ident) {
		exchange.From(c.ctx()).SetFix("Name the allocation by its UUID or its name (A-Z a-z 0-9 - . _ ~): `openstack baremetal allocation list` shows both.")
		return nil, errorf(http.StatusBadRequest, "Expected a logical name or UUID but received %s.", ident)
	}
	// Most allocations have their Ironic name as object name: one read of
	// etcd finds them.
	if len(validation.IsDNS1123Subdomain(ident)) == 0 {
		a, err := c.getAllocation(ident)
		if err == nil && a.Spec.IronicName == ident {
			return a, nil
		}
		var ae *apiError
		if err != nil && !errors.As(err, &ae) {
			return nil, err
		}
	}
	return c.findAllocationBy(ident, func(a *nodusv1.Allocation) bool { return a.Spec.IronicName == ident })
}

// findAllocationBy looks for the allocation that matches in the watch
// cache and, on a miss, in etcd: one made a moment ago may not be in the
// cache yet. Each list is learnt for the next lookups by UUID.
func (c *call) findAllocationBy(ident string, match func(*nodusv1.Allocation) bool) (*nodusv1.Allocation, error) {
	for _, opts := range []*metainternalversion.ListOptions{fromCache, consistent} {
		all, err := c.listAllocationsWith(opts)
		if err != nil {
			return nil, err
		}
		c.h.allocationNames.learn(len(all), func(i int) (string, string) { return string(all[i].UID), all[i].Name })
		for i := range all {
			if !match(&all[i]) {
				continue
			}
			a, err := c.getAllocation(all[i].Name)
			var ae *apiError
			if err != nil && !errors.As(err, &ae) {
				return nil, err
			}
			if err == nil && match(a) {
				return a, nil
			}
			break // gone, or its name is another allocation's now: ask etcd
		}
	}
	return nil, errorf(http.StatusNotFound, "Allocation %s could not be found.", ident)
}

// getAllocation reads the allocation of that object name from etcd.
func (c *call) getAllocation(name string) (*nodusv1.Allocation, error) {
	obj, err := c.h.Allocations.Get(c.ctx(), name, &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errorf(http.StatusNotFound, "Allocation %s could not be found.", name)
	}
	if err != nil {
		return nil, err
	}
	return obj.(*nodusv1.Allocation), nil
}

func looksLikeUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
				return false
			}
		}
	}
	return true
}

func baseURL(req *http.Request) string { return "https://" + req.Host }

// secretWords mark the fields whose values the audit log does not keep:
// Ironic's clients send a BMC's credentials in driver_info (refused here,
// but logged as they came): passwords, SNMP's keys and communities, IPMI's
// Kg key, as oslo's mask_password and Ironic's drivers name them.
var secretWords = []string{"pass", "pwd", "secret", "token", "credential", "_key", "community", "kg"}

// auditBody is a write's body as the audit log keeps it: the values of
// fields (or of JSON patch operations on paths) whose names say they are
// secrets replaced by "***", and the user information of URLs in its
// strings (redfish_address: https://user:password@…). A body that is no
// JSON is not kept, only its size: it is refused, and what it holds is
// beyond what the parser could find.
func auditBody(body []byte) string {
	var v interface{}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&v) != nil || dec.More() {
		return fmt.Sprintf("<%d bytes, not JSON>", len(body))
	}
	if !redact(v) {
		return string(body)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(body)
	}
	return string(out)
}

// redact masks the secrets in v in place, and says whether it found any.
func redact(v interface{}) bool {
	found := false
	switch x := v.(type) {
	case map[string]interface{}:
		if path, ok := x["path"].(string); ok && secretName(path) {
			if _, ok := x["value"]; ok {
				x["value"], found = "***", true
			}
		}
		for k, e := range x {
			switch {
			case secretName(k):
				x[k], found = "***", true
			case isString(e):
				if masked, ok := withoutUserInfo(e.(string)); ok {
					x[k], found = masked, true
				}
			default:
				found = redact(e) || found
			}
		}
	case []interface{}:
		for i, e := range x {
			if masked, ok := withoutUserInfo(fmt.Sprint(e)); ok && isString(e) {
				x[i], found = masked, true
				continue
			}
			found = redact(e) || found
		}
	}
	return found
}

func isString(v interface{}) bool {
	_, ok := v.(string)
	return ok
}

// withoutUserInfo is s with the user information of the URL it is masked,
// ok only when s is such a URL.
func withoutUserInfo(s string) (string, bool) {
	if !strings.Contains(s, "@") || !strings.Contains(s, "://") {
		return s, false
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s, false
	}
	u.User = url.User("***")
	return u.String(), true
}

func secretName(s string) bool {
	s = strings.ToLower(s)
	for _, w := range secretWords {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
