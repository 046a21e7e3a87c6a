package reservation

import (
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/registry/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/agentview"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Storage is the Reservation resource, as node agents are shown it
// (served), and its status.
func Storage(reservations base.Stores) map[string]rest.Storage {
	storage := reservations.Storage("reservations", "rsv")
	storage["reservations"] = &agentview.REST{REST: storage["reservations"].(*base.REST), Shown: served}
	return storage
}

// served selects what a node agent lists and watches of the reservations
// on its node: those whose access it applies, active, or being retired
// (releasing, ending). One whose access ended (released, ended) stays on
// its node's list until deleted, naming a project, its login user and
// term, and who released it; the agent's credential is its host's, which
// a later tenant with root there may have copied (docs/security.md). One
// whose access has not begun names no node yet.
var served = func() fields.Selector {
	var terms []fields.Selector
	for _, s := range unserved {
		terms = append(terms, fields.OneTermNotEqualSelector("status.state", string(s)))
	}
	return fields.AndSelectors(terms...)
}()

// unserved are the states whose access no agent applies.
var unserved = []nodusv1.ReservationState{"", nodusv1.ReservationStatePending, nodusv1.ReservationStateReleased, nodusv1.ReservationStateEnded}
