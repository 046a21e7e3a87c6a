// Package apierror is the one registry of error reasons the server may put in
// a Status body. Each reason has an HTTP code, a docs page under docs/errors/
// and a fix: the next step for the caller, specific to the request when the
// request says enough.
package apierror

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Request is what a fix may refer to: the parts of the failed request.
type Request struct {
	Verb        string // Kubernetes verb: get, list, create, update, patch, delete, watch…
	Resource    string // plural resource, e.g. reservedhosts
	Subresource string
	Namespace   string
	Name        string
	Path        string
}

// kubectlTarget renders the request's object the way kubectl spells it.
func (r Request) kubectlTarget() string {
	target := r.Resource
	if target == "" {
		target = "<resource>"
	}
	if r.Name != "" {
		target += " " + r.Name
	}
	if r.Namespace != "" {
		target += " -n " + r.Namespace
	}
	return target
}

// Reason is one registered error reason.
type Reason struct {
	// Name is the value of Status.reason, in Kubernetes' PascalCase.
	Name metav1.StatusReason
	// Code is the HTTP status the reason is sent with.
	Code int
	// Summary is one line on what went wrong, used when the source gave no message.
	Summary string
	// Fix renders the next step for the caller.
	Fix func(Request) string
}

// Reasons of our own, beyond the ones Kubernetes defines.
const (
	// ReasonProjectNotFound: a namespaced object was sent to a namespace that is no Project.
	ReasonProjectNotFound metav1.StatusReason = "ProjectNotFound"
	// ReasonPreconditionFailed: If-Match named another version of the object.
	ReasonPreconditionFailed metav1.StatusReason = "PreconditionFailed"
	// ReasonReleaseNotAgreed: a release without agreed: true.
	ReasonReleaseNotAgreed metav1.StatusReason = "ReleaseNotAgreed"
	// ReasonEpochRequired: an access change without the epoch the caller reviewed.
	ReasonEpochRequired metav1.StatusReason = "EpochRequired"
	// ReasonEpochConflict: the epoch the caller reviewed is no longer current.
	ReasonEpochConflict metav1.StatusReason = "EpochConflict"
	// ReasonAlreadyReleased: the host is releasing or released.
	ReasonAlreadyReleased metav1.StatusReason = "AlreadyReleased"
	// ReasonTermEnded: the reservation's term is over.
	ReasonTermEnded metav1.StatusReason = "TermEnded"
	// ReasonReservationNotActive: the reservation has not started.
	ReasonReservationNotActive metav1.StatusReason = "ReservationNotActive"
	// ReasonIdempotencyKeyInvalid: a malformed Idempotency-Key header.
	ReasonIdempotencyKeyInvalid metav1.StatusReason = "IdempotencyKeyInvalid"
	// ReasonIdempotencyKeyReused: the key was used for another request.
	ReasonIdempotencyKeyReused metav1.StatusReason = "IdempotencyKeyReused"
	// ReasonIdempotencyKeyInFlight: the first request with the key is still running.
	ReasonIdempotencyKeyInFlight metav1.StatusReason = "IdempotencyKeyInFlight"
	// ReasonNodeActive: the allocation of an active node out of maintenance cannot go.
	ReasonNodeActive metav1.StatusReason = "NodeActive"
	// ReasonBorrowingNotAllowed: an execution in a pool the project may not borrow from.
	ReasonBorrowingNotAllowed metav1.StatusReason = "BorrowingNotAllowed"
	// ReasonLendingClosed: a lend into a pool that does not accept lending.
	ReasonLendingClosed metav1.StatusReason = "LendingClosed"
	// ReasonExecutionFinished: a change to an execution that already ended.
	ReasonExecutionFinished metav1.StatusReason = "ExecutionFinished"
	// ReasonExecutionActive: deleting an execution that holds a host.
	ReasonExecutionActive metav1.StatusReason = "ExecutionActive"
	// ReasonHostNotLent: an agent would start an execution on a host that is no longer lent.
	ReasonHostNotLent metav1.StatusReason = "HostNotLent"
	// ReasonStaleAgent: a report from an agent whose credential generation is not the node's current one.
	ReasonStaleAgent metav1.StatusReason = "StaleAgent"
	// ReasonProjectHasReservations: a project with live reservations was to be deleted.
	ReasonProjectHasReservations metav1.StatusReason = "ProjectHasReservations"
	// ReasonNodeReserved: the node is held by another live reservation.
	ReasonNodeReserved metav1.StatusReason = "NodeReserved"
	// ReasonNodeOwesCleaning: a node held by a reservation, or whose cleaning is not done, was to be deleted.
	ReasonNodeOwesCleaning metav1.StatusReason = "NodeOwesCleaning"
	// ReasonNodeInUse: the resource class of a node in use was to change.
	ReasonNodeInUse metav1.StatusReason = "NodeInUse"
	// ReasonRequestURITooLong: a request's URI (path and query) is past the server's bound.
	ReasonRequestURITooLong metav1.StatusReason = "RequestURITooLong"
	// ReasonNodeAllocated: the node is held by an allocation that is not the reservation's.
	ReasonNodeAllocated metav1.StatusReason = "NodeAllocated"
	// ReasonAwaitingNode: a reservation waits for a node: its allocation is not active yet.
	ReasonAwaitingNode metav1.StatusReason = "AwaitingNode"
	// ReasonLoginUserUnknown: neither the reservation nor its node names a login user.
	ReasonLoginUserUnknown metav1.StatusReason = "LoginUserUnknown"
	// ReasonNodeLost: an active reservation's node was deleted and is held by another reservation now.
	ReasonNodeLost metav1.StatusReason = "NodeLost"
	// ReasonNodeNotFound: a reservation names a node that does not exist.
	ReasonNodeNotFound metav1.StatusReason = "NodeNotFound"
	// ReasonSSHAddressUnknown: the host's agent reports no address where its sshd is reached.
	ReasonSSHAddressUnknown metav1.StatusReason = "SSHAddressUnknown"
	// ReasonStorageFull: etcd's database reached its quota and refuses writes.
	ReasonStorageFull metav1.StatusReason = "StorageFull"
	// ReasonNodeInMaintenance: a reservation's node is in maintenance.
	ReasonNodeInMaintenance metav1.StatusReason = "NodeInMaintenance"
	// ReasonNodeCleaning: a reservation's node is being cleaned after its previous tenant.
	ReasonNodeCleaning metav1.StatusReason = "NodeCleaning"
	// ReasonEnrollmentTokenNodeMismatch: a token issued for one node used to enroll another.
	ReasonEnrollmentTokenNodeMismatch metav1.StatusReason = "EnrollmentTokenNodeMismatch"
	// ReasonNodeAlreadyEnrolled: a token issued without a node name used on a node that exists.
	ReasonNodeAlreadyEnrolled metav1.StatusReason = "NodeAlreadyEnrolled"
	// ReasonEnrollmentTokenPoolMismatch: a token of one pool used on a node of another.
	ReasonEnrollmentTokenPoolMismatch metav1.StatusReason = "EnrollmentTokenPoolMismatch"
	// ReasonEnrollmentTokenUsed: a used enrollment token presented by another agent key, for
	// another node, or after the enrollment it made was superseded.
	ReasonEnrollmentTokenUsed metav1.StatusReason = "EnrollmentTokenUsed"
	// ReasonServerOwnedField: a node agent, or anyone but the server for the
	// lifecycle's fields, wrote a status field only the server writes.
	ReasonServerOwnedField metav1.StatusReason = "ServerOwnedField"
	// ReasonTooManyIdempotencyKeys: a caller keeps as many idempotent answers as it may.
	ReasonTooManyIdempotencyKeys metav1.StatusReason = "TooManyIdempotencyKeys"
	// ReasonExecutionLimitReached: a project holds as many Executions as it may.
	ReasonExecutionLimitReached metav1.StatusReason = "ExecutionLimitReached"
	// ReasonAgentCredentialRetired: an agent certificate of an older generation or of a deleted node.
	ReasonAgentCredentialRetired metav1.StatusReason = "AgentCredentialRetired"
	// ReasonAllocationNameTaken: another allocation has the Ironic name.
	ReasonAllocationNameTaken metav1.StatusReason = "AllocationNameTaken"
	// ReasonAllocationUUIDTaken: another allocation has the UUID.
	ReasonAllocationUUIDTaken metav1.StatusReason = "AllocationUUIDTaken"
	// ReasonMicroversionNotSupported: the Ironic API microversion asked
	// for, or the one a field, filter or route needs, is not served.
	ReasonMicroversionNotSupported metav1.StatusReason = "MicroversionNotSupported"
)

var registry = func() map[metav1.StatusReason]Reason {
	list := []Reason{
		{metav1.StatusReasonBadRequest, http.StatusBadRequest, "The request is malformed.",
			func(r Request) string {
				return "Correct the request body or query parameter named in the message and send it again; `kubectl explain " + orDefault(r.Resource, "<resource>") + "` shows the accepted fields."
			}},
		{metav1.StatusReasonUnauthorized, http.StatusUnauthorized, "The request carries no valid credential.",
			func(r Request) string {
				if r.Resource == "nodes" && (r.Subresource == "heartbeat" || r.Subresource == "heartbeatstream" || r.Subresource == "renew") {
					// An agent's own paths: its certificate expired (its renewals failed) or is another server's.
					return "If this is nodusd: its certificate expired (it renews it two thirds into its validity; its log says why it could not) or is not of this server's CA. Enroll the host again: an operator runs `nodus pools token POOL --node " +
						orDefault(r.Name, "NODE") + "`, then run the printed `nodusd enroll` on the host."
				}
				return "Authenticate: use the kubeconfig nodus-server wrote (DIR/admin.kubeconfig) or `nodus login --server URL` (it asks for a current access token from an operator)."
			}},
		{metav1.StatusReasonForbidden, http.StatusForbidden, "The caller may not do this.",
			func(r Request) string {
				if r.Namespace != "" {
					return fmt.Sprintf("Ask an admin of project %q (or an operator) for a role that allows %q on %s; `nodus whoami` shows who you are.", r.Namespace, r.Verb, orDefault(r.Resource, r.Path))
				}
				return fmt.Sprintf("%q on %s is for operators; ask an operator, or use your project's namespace with -n PROJECT.", r.Verb, orDefault(r.Resource, r.Path))
			}},
		{metav1.StatusReasonNotFound, http.StatusNotFound, "The object or path does not exist.",
			func(r Request) string {
				if r.Resource == "" {
					return "Check the URL; `kubectl api-resources` lists what this server serves."
				}
				list := "kubectl get " + r.Resource
				if r.Namespace != "" {
					list += " -n " + r.Namespace
				}
				return "Check the name and the project: `" + list + "` lists what exists."
			}},
		{metav1.StatusReasonMethodNotAllowed, http.StatusMethodNotAllowed, "The resource does not support this method.",
			func(r Request) string {
				if r.Resource == "namespaces" {
					return "Namespaces are read-only views of Projects: create, change or delete the Project of that name instead (operators only)."
				}
				return "Use a method this resource supports; `kubectl api-resources -o wide` lists the verbs of " + orDefault(r.Resource, "each resource") + "."
			}},
		{metav1.StatusReasonNotAcceptable, http.StatusNotAcceptable, "The server cannot produce the requested media type.",
			func(Request) string {
				return "Ask for application/json, application/yaml or application/vnd.kubernetes.protobuf in the Accept header."
			}},
		{metav1.StatusReasonAlreadyExists, http.StatusConflict, "An object of that name already exists.",
			func(r Request) string {
				return "Pick another name, or change the existing object with `kubectl apply` or `kubectl edit " + r.kubectlTarget() + "`."
			}},
		{metav1.StatusReasonConflict, http.StatusConflict, "The object changed since it was read.",
			func(r Request) string {
				return "Read the object again (`kubectl get " + r.kubectlTarget() + " -o yaml`), apply your change to that version and retry."
			}},
		{metav1.StatusReasonGone, http.StatusGone, "The requested resource version is too old.",
			func(Request) string {
				return "List again without a resourceVersion (or with the one the new list returns) and resume watching from there."
			}},
		{metav1.StatusReasonExpired, http.StatusGone, "The continue token or resource version has expired.",
			func(Request) string {
				return "Start the list again from the beginning, without the continue token."
			}},
		{metav1.StatusReasonRequestEntityTooLarge, http.StatusRequestEntityTooLarge, "The request body is too large.",
			func(r Request) string {
				if r.Subresource != "" && r.Subresource != "status" {
					return "Send a smaller body: an action takes a few fields, within the bytes the message names."
				}
				return "Send a smaller body: one object per request, within the bytes the message names (3 MiB for an object)."
			}},
		{ReasonRequestURITooLong, http.StatusRequestURITooLong, "The request URI is too long.",
			func(Request) string {
				return "Send a shorter request: a selector with fewer values, split over several requests, or a list filtered on your side."
			}},
		{metav1.StatusReasonUnsupportedMediaType, http.StatusUnsupportedMediaType, "The request body's media type is not supported.",
			func(r Request) string {
				if r.Verb == "patch" {
					return "Send the patch as application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json or application/apply-patch+yaml."
				}
				return "Send the body as application/json, application/yaml or application/vnd.kubernetes.protobuf with a matching Content-Type header."
			}},
		{metav1.StatusReasonInvalid, http.StatusUnprocessableEntity, "The object is invalid.",
			func(r Request) string {
				return "Correct each field listed in details.causes and send the object again; `kubectl explain " + orDefault(r.Resource, "<resource>") + "` documents the fields."
			}},
		{metav1.StatusReasonTooManyRequests, http.StatusTooManyRequests, "The server is busy.",
			func(Request) string {
				return "Retry after the number of seconds in the Retry-After header, with back-off."
			}},
		{metav1.StatusReasonInternalError, http.StatusInternalServerError, "The server failed while handling the request.",
			func(Request) string {
				return "Retry once; if it fails again, send the requestId of this error to the operators so they can find it in the server log."
			}},
		{metav1.StatusReasonStoreReadError, http.StatusInternalServerError, "An object in the server's storage cannot be read.",
			func(r Request) string {
				return "Send the requestId to the operators: details.causes names the unreadable key. Reads of the other objects are unaffected; an operator can delete the unreadable one with the DeleteOptions field ignoreStoreReadErrorWithClusterBreakingPotential (docs/errors/StorageReadError)."
			}},
		{metav1.StatusReasonServiceUnavailable, http.StatusServiceUnavailable, "The server cannot handle the request right now.",
			func(Request) string {
				return "Retry in a few seconds; if it persists, the operators should check `/readyz?verbose` and the storage (etcd)."
			}},
		{ReasonStorageFull, http.StatusInsufficientStorage, "The server's storage (etcd) is full: it takes no writes until room is made.",
			func(r Request) string {
				return "Reads still work; retry the write later. Operators: delete what is no longer needed (executions that ended: `nodus executions list -n PROJECT`, then `kubectl delete execution NAME -n PROJECT`; reservations and allocations that are over); the embedded etcd then compacts, defragments and takes writes again by itself within seconds (an external etcd needs `etcdctl compact`, `defrag` and `alarm disarm`), or raise --embedded-etcd-quota-bytes and restart."
			}},
		{metav1.StatusReasonServerTimeout, http.StatusInternalServerError, "The server could not finish the request in time.",
			func(Request) string { return "Retry the request; long operations finish in the background." }},
		{metav1.StatusReasonTimeout, http.StatusGatewayTimeout, "The request did not finish within its deadline.",
			func(Request) string {
				return "Retry with a longer timeout (kubectl --request-timeout), or narrow a list with a label selector or --chunk-size."
			}},
		{ReasonPreconditionFailed, http.StatusPreconditionFailed, "The object changed since the version named in If-Match.",
			func(r Request) string {
				return "Read the host again (`kubectl get " + r.kubectlTarget() + " -o yaml` shows it; the ETag header of a GET names its version), review it, and retry with the new ETag in If-Match."
			}},
		{ReasonReleaseNotAgreed, http.StatusUnprocessableEntity, "A release must be agreed to explicitly.",
			func(r Request) string {
				return "Send `\"agreed\": true` to confirm that access ends for good and the term is not shortened (`nodus release " + r.Namespace + "/" + r.Name + "` asks you)."
			}},
		{ReasonEpochRequired, http.StatusUnprocessableEntity, "The request does not say which epoch the caller reviewed.",
			func(r Request) string {
				return "Read the host (`kubectl get " + r.kubectlTarget() + " -o jsonpath={.status.reservation.epoch}`) and send that number as `epoch`."
			}},
		{ReasonEpochConflict, http.StatusConflict, "The reservation's access changed since the caller reviewed it.",
			func(r Request) string {
				return "Read the host again (`kubectl get " + r.kubectlTarget() + " -o yaml`), review what changed, and retry with the current epoch from details.causes."
			}},
		{ReasonAlreadyReleased, http.StatusConflict, "The host's capacity is already released.",
			func(r Request) string {
				return "Nothing to do: `kubectl get " + r.kubectlTarget() + " -o jsonpath={.status.release}` shows when the release was requested and drained."
			}},
		{ReasonTermEnded, http.StatusConflict, "The reservation's term is over.",
			func(r Request) string {
				return "Nothing to release: access ended with the term (`status.reservation.endsAt`). Ask an operator for a new reservation if you need the host."
			}},
		{ReasonReservationNotActive, http.StatusConflict, "The reservation has not started yet.",
			func(r Request) string {
				return "Wait until `status.reservation.state` is active (after `startsAt`), or ask an operator to cancel the reservation."
			}},
		{ReasonIdempotencyKeyInvalid, http.StatusBadRequest, "The Idempotency-Key header is malformed.",
			func(Request) string {
				return "Send one Idempotency-Key of at most 255 visible ASCII characters, as a raw token or a quoted string; a random UUID is a good key."
			}},
		{ReasonIdempotencyKeyReused, http.StatusUnprocessableEntity, "The Idempotency-Key was used for a different request.",
			func(Request) string {
				return "Use a new Idempotency-Key for a new request; reuse a key only to retry exactly the same request (same body and query)."
			}},
		{ReasonIdempotencyKeyInFlight, http.StatusConflict, "The first request with this Idempotency-Key is still running.",
			func(Request) string {
				return "Retry the same request with the same key after the Retry-After seconds; you will get the first request's response."
			}},
		{ReasonNodeActive, http.StatusConflict, "The allocation's node is active and not in maintenance.",
			func(r Request) string {
				return "End the node's use first (its reservation ends or is released), or put the node in maintenance (`kubectl patch node NAME --type merge -p '{\"spec\":{\"maintenance\":true}}'`), then delete the allocation."
			}},
		{ReasonBorrowingNotAllowed, http.StatusForbidden, "The project may not borrow this in this pool.",
			func(r Request) string {
				return "Use a pool whose lending is open to project " + r.Namespace + " and stay within its GPU cap; an operator sets them in the Pool's spec.lending."
			}},
		{ReasonLendingClosed, http.StatusConflict, "The host's pool does not accept lending.",
			func(r Request) string {
				return "Keep the host for your own use, or ask an operator to open lending in the host's pool (the Pool's spec.lending.open)."
			}},
		{ReasonExecutionFinished, http.StatusConflict, "The execution already ended.",
			func(r Request) string {
				return fmt.Sprintf("Nothing is left to stop: read how it ended with `nodus executions get %s/%s`; submit a new execution to run it again.", orDefault(r.Namespace, "PROJECT"), orDefault(r.Name, "NAME"))
			}},
		{ReasonExecutionActive, http.StatusConflict, "The execution is placed on a host or running there.",
			func(r Request) string {
				return fmt.Sprintf("Cancel it first (`nodus executions cancel %s/%s`), then delete it once it ended.", r.Namespace, r.Name)
			}},
		{ReasonHostNotLent, http.StatusConflict, "The host is no longer lent, so the execution may not start there.",
			func(Request) string {
				return "Do not start the execution; report it as drained. The scheduler places new executions only on hosts lent now."
			}},
		{ReasonStaleAgent, http.StatusConflict, "The report comes from an agent credential that is no longer the node's current one.",
			func(Request) string {
				return "Re-enroll the agent (`nodusd enroll`) or stop the old one; only the node's current agent generation is heard."
			}},
		{ReasonProjectHasReservations, http.StatusConflict, "The project still has live reservations.",
			func(r Request) string {
				return fmt.Sprintf("Let them end or be released first, or delete the project with its reservations retired: `nodus projects delete %s --retire-reservations` (or `kubectl annotate project %s nodus.dev/retire-reservations=true` before `kubectl delete project %s`).", r.Name, r.Name, r.Name)
			}},
		{ReasonNodeReserved, http.StatusConflict, "The node is held by another live reservation.",
			func(r Request) string {
				return "Place the reservation on another node (`nodus nodes list` shows which are available), give it a resource class instead of a node, or wait until the node's reservation ends and its cleaning is done; the reservation's Placed condition names the holder."
			}},
		{ReasonNodeOwesCleaning, http.StatusConflict, "The node still owes its cleaning after a tenant.",
			func(r Request) string {
				name := r.Name
				if name == "" {
					name = "NAME"
				}
				return fmt.Sprintf("Let the reservation end or be released and the node's cleaning finish (`nodus nodes get %s` shows status.cleaning; after a failed one, fix it and `nodus nodes clean %s`), then delete it. If the machine is re-imaged, or gone for good, before it is enrolled again: `kubectl annotate node %s %s=true`, then delete it.",
					name, name, name, "nodus.dev/delete-uncleaned")
			}},
		{ReasonNodeInUse, http.StatusConflict, "The node is in use: its resource class cannot change.",
			func(r Request) string {
				name := r.Name
				if name == "" {
					name = "NAME"
				}
				return fmt.Sprintf("Change the class once the node is available again: after its allocation is deleted, or its reservation ended and its cleaning finished (`nodus nodes get %s` shows status.allocation, status.reservation and status.provisionState). Traits, maintenance, owner and extra may change meanwhile.", name)
			}},
		{ReasonNodeAllocated, http.StatusConflict, "The node is held by an allocation that is not the reservation's.",
			func(r Request) string {
				return "Place the reservation on the allocation instead (`spec.placement.allocation`), on another node, or by resource class; or delete the allocation (`openstack baremetal allocation delete NAME`) if it is no longer used. The reservation stays pending until the node is free."
			}},
		{ReasonAwaitingNode, http.StatusConflict, "The reservation waits for a node: its allocation is not active yet.",
			func(r Request) string {
				return "Wait while the allocation is placed; if it stays so, its message says why (no free node of the class and traits, an error): `kubectl get allocation NAME -o yaml`, `nodus nodes list` for free nodes."
			}},
		{ReasonLoginUserUnknown, http.StatusConflict, "Neither the reservation nor its node names a login user.",
			func(r Request) string {
				return "Give the reservation a login user (`kubectl patch reservation NAME --type=merge -p '{\"spec\":{\"loginUser\":\"ubuntu\"}}'`) or its node a default one (the same patch on the node). The reservation activates once one is known."
			}},
		{ReasonNodeLost, http.StatusConflict, "The reservation's node was deleted, and the machine enrolled again under its name is held by another reservation.",
			func(r Request) string {
				return "The reservation's access ended on that machine and will not come back. Make a new reservation for the project (on another node, or by resource class) for the rest of the term; `kubectl get reservation NAME -o yaml` names the node and its holder."
			}},
		{ReasonNodeNotFound, http.StatusConflict, "The reservation's node does not exist.",
			func(r Request) string {
				return "Check the node's name (`nodus nodes list`); enroll it first if it is new. The reservation stays pending and activates once the node exists."
			}},
		{ReasonSSHAddressUnknown, http.StatusConflict, "The host's agent reports no address where its SSH server is reached.",
			func(r Request) string {
				return "Ask your operator: the host's nodusd runs without --ssh-address (sshAddress in its configuration file). The host shows a connect once its agent reports one; then connect again."
			}},
		{ReasonNodeInMaintenance, http.StatusConflict, "The reservation's node is in maintenance.",
			func(r Request) string {
				return "Take the node out of maintenance once it is fit (`nodus nodes maintenance NAME off`) or place the reservation elsewhere; it stays pending until then."
			}},
		{ReasonNodeCleaning, http.StatusConflict, "The node is being cleaned after its previous tenant.",
			func(r Request) string {
				return "Wait: the reservation activates once the node's agent reports its cleaning done (`nodus nodes get NAME` shows status.cleaning). A failed cleaning puts the node in maintenance; fix it, then `nodus nodes clean NAME`."
			}},
		{ReasonEnrollmentTokenNodeMismatch, http.StatusForbidden, "The enrollment token was issued for another node.",
			func(r Request) string {
				return "Enroll the node the token names (`kubectl get enrollmenttoken NAME -o jsonpath={.spec.nodeName}`), or have an operator issue a token for this node: `nodus pools token POOL --node " + orDefault(r.Name, "NAME") + "`."
			}},
		{ReasonNodeAlreadyEnrolled, http.StatusForbidden, "A node of that name exists; only a token issued for it may enroll it again.",
			func(r Request) string {
				return "To re-enroll node " + orDefault(r.Name, "NAME") + ", have an operator issue a token bound to it: `nodus pools token POOL --node " + orDefault(r.Name, "NAME") + "`. To enroll a new server, pick a name no node has."
			}},
		{ReasonEnrollmentTokenPoolMismatch, http.StatusForbidden, "The node belongs to another pool than the enrollment token.",
			func(r Request) string {
				return "Use a token of the node's own pool (`kubectl get node.nodus.dev " + orDefault(r.Name, "NAME") + " -o jsonpath={.spec.pool}`): enrollment never moves a node. An operator moves a node by changing its spec.pool."
			}},
		{ReasonEnrollmentTokenUsed, http.StatusForbidden, "The enrollment token was used; it enrolls once, and only the agent key it enrolled may ask for that enrollment's answer again.",
			func(r Request) string {
				return "Have an operator issue a new token for this node (`nodus pools token POOL --node " + orDefault(r.Name, "NAME") + "`) and run the printed `nodusd enroll`. A `nodusd enroll` that lost its answer finishes when run again on the same host with the same --state-dir, which keeps its key (enroll.key) until enrolled."
			}},
		{ReasonServerOwnedField, http.StatusForbidden, "A node agent may not write a field of its Node the server or the operator owns; no one but the server writes a Node's claims, cleaning or provision state.",
			func(r Request) string {
				return "An agent reports only status.inventory, status.sshHostKey, status.sshAddress and status.executionSlots (and heartbeats); drop the other fields from the write. States, claims, conditions, epochs and generations are the server's; labels, annotations, finalizers and owner references the operator's. An operator moves a node's lifecycle through the server's actions: `nodus nodes clean " + orDefault(r.Name, "NAME") + "` asks for a cleaning again, an allocation's or reservation's end frees the node."
			}},
		{ReasonAgentCredentialRetired, http.StatusForbidden, "The agent certificate was replaced or its node deleted.",
			func(r Request) string {
				return "Stop this agent, or enroll it anew with a token issued for the node (`nodus pools token POOL --node NODE`, then `nodusd enroll`); a replaced credential never works again."
			}},
		{ReasonTooManyIdempotencyKeys, http.StatusTooManyRequests, "The caller keeps as many Idempotency-Key answers as it may.",
			func(Request) string {
				return "Send a new Idempotency-Key only for a new request, and reuse it for that request's retries; answers are kept 24 hours, and each one that expires makes room for one new key; until then a new key is refused again, while a retry of a kept key is answered."
			}},
		{ReasonExecutionLimitReached, http.StatusForbidden, "The project holds as many Executions as it may.",
			func(r Request) string {
				return fmt.Sprintf("Delete executions that ended (`nodus executions list -n %s`, then `kubectl delete execution NAME -n %s`) before submitting more; an operator sets the bound (--max-executions-per-project).", orDefault(r.Namespace, "PROJECT"), orDefault(r.Namespace, "PROJECT"))
			}},
		{ReasonAllocationNameTaken, http.StatusConflict, "Another allocation has that Ironic name.",
			func(Request) string {
				return "Pick another name, or rename or delete the allocation that has it: `openstack baremetal allocation show NAME` finds it (`kubectl get allocations -o custom-columns=NAME:.metadata.name,IRONIC:.spec.ironicName` lists every Ironic name)."
			}},
		{ReasonAllocationUUIDTaken, http.StatusConflict, "Another allocation has that UUID.",
			func(Request) string {
				return "Leave uuid out of the request to get a new UUID, or send another one; `openstack baremetal allocation show UUID` shows the allocation that has it."
			}},
		{ReasonMicroversionNotSupported, http.StatusNotAcceptable, "The Ironic API microversion asked for, or the one a field, filter or route needs, is not served.",
			func(Request) string {
				return "Send X-OpenStack-Ironic-API-Version: a version from 1.1 to 1.60, or latest (openstack --os-baremetal-api-version, gophercloud's client.Microversion); a field, filter or route newer than the request's version needs its version or later."
			}},
		{ReasonProjectNotFound, http.StatusNotFound, "The namespace is not a Nodus project.",
			func(r Request) string {
				return fmt.Sprintf("Use the namespace of an existing project (`kubectl get projects` for operators, `kubectl get namespaces` for everyone), or have an operator create Project %q first.", r.Namespace)
			}},
	}
	m := make(map[metav1.StatusReason]Reason, len(list))
	for _, r := range list {
		m[r.Name] = r
	}
	return m
}()

// byCode chooses the reason for a Status whose reason is empty or foreign.
var byCode = map[int]metav1.StatusReason{
	http.StatusBadRequest:            metav1.StatusReasonBadRequest,
	http.StatusUnauthorized:          metav1.StatusReasonUnauthorized,
	http.StatusForbidden:             metav1.StatusReasonForbidden,
	http.StatusNotFound:              metav1.StatusReasonNotFound,
	http.StatusMethodNotAllowed:      metav1.StatusReasonMethodNotAllowed,
	http.StatusNotAcceptable:         metav1.StatusReasonNotAcceptable,
	http.StatusConflict:              metav1.StatusReasonConflict,
	http.StatusGone:                  metav1.StatusReasonGone,
	http.StatusPreconditionFailed:    ReasonPreconditionFailed,
	http.StatusRequestEntityTooLarge: metav1.StatusReasonRequestEntityTooLarge,
	http.StatusRequestURITooLong:     ReasonRequestURITooLong,
	http.StatusUnsupportedMediaType:  metav1.StatusReasonUnsupportedMediaType,
	http.StatusUnprocessableEntity:   metav1.StatusReasonInvalid,
	http.StatusTooManyRequests:       metav1.StatusReasonTooManyRequests,
	http.StatusInternalServerError:   metav1.StatusReasonInternalError,
	http.StatusServiceUnavailable:    metav1.StatusReasonServiceUnavailable,
	http.StatusGatewayTimeout:        metav1.StatusReasonTimeout,
}

// Lookup returns the registered reason for a reason name and HTTP code. A
// reason that is not registered falls back to the reason registered for the
// code, and an unknown code to BadRequest or InternalError.
func Lookup(name metav1.StatusReason, code int) Reason {
	if r, ok := registry[name]; ok {
		return r
	}
	if n, ok := byCode[code]; ok {
		return registry[n]
	}
	if code >= 500 {
		return registry[metav1.StatusReasonInternalError]
	}
	return registry[metav1.StatusReasonBadRequest]
}

// All returns every registered reason, sorted by name.
func All() []Reason {
	out := make([]Reason, 0, len(registry))
	for _, r := range registry {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// IsRegistered says whether name is a registered reason.
func IsRegistered(name metav1.StatusReason) bool {
	_, ok := registry[name]
	return ok
}

// DocsURL is where the docs page of a reason lives under base.
func DocsURL(base string, name metav1.StatusReason) string {
	return strings.TrimSuffix(base, "/") + "/" + string(name)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
