// Package nodedeletion keeps a node's cleaning obligation from being
// deleted with its Node. The obligation lives on the Node (the reservation's
// claim, the cleaning request and its outcome); the same machine enrolled
// again is a new Node, available at its first heartbeat, with the former
// tenant's accounts, jobs and files still on it. So a Node that still owes
// a cleaning is deleted only when the operator says the machine will not
// come back as it is (nodusv1.AnnotationDeleteUncleaned).
package nodedeletion

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apiserver/pkg/admission"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Plugin is the admission check.
type Plugin struct {
	*admission.Handler
}

// New returns the check for deletions.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Delete)}
}

var _ admission.ValidationInterface = &Plugin{}

// Validate refuses deleting a node that owes a cleaning. It runs on the
// node as stored when it is deleted (the library's conditional delete), so
// a claim written a moment before counts.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != nodusv1.Resource("nodes") || a.GetSubresource() != "" {
		return nil
	}
	n, ok := a.GetOldObject().(*nodusv1.Node)
	if !ok || n.Annotations[nodusv1.AnnotationDeleteUncleaned] == "true" {
		return nil
	}
	owed := Owed(n)
	if owed == "" {
		return nil
	}
	return apierror.New(ctx, apierror.ReasonNodeOwesCleaning, a.GetResource().GroupResource(), n.Name,
		fmt.Sprintf("node %s %s; deleted, the machine enrolled again would come back uncleaned. Delete it once its cleaning is done, or annotate it %s=true if it is re-imaged or gone for good",
			n.Name, owed, nodusv1.AnnotationDeleteUncleaned), "")
}

// Owed says what cleaning node n still owes, "" when none.
func Owed(n *nodusv1.Node) string {
	var owed []string
	if n.Status.Reservation != "" {
		owed = append(owed, "is held by reservation "+n.Status.Reservation)
	}
	if c := n.Status.Cleaning; c != nil && c.Phase != nodusv1.CleaningSucceeded {
		what := fmt.Sprintf("has cleaning request %d %s", c.Request, strings.ToLower(string(c.Phase)))
		if c.Reservation != "" {
			// None for an operator's first cleaning, or one its machine's
			// state owed when it was enrolled.
			what += " after reservation " + c.Reservation
		}
		owed = append(owed, what)
	} else if n.Status.ProvisionState == nodusv1.ProvisionStateCleaning {
		owed = append(owed, "is being cleaned")
	}
	return strings.Join(owed, " and ")
}
