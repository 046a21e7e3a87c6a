package reservation

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// An agent is shown exactly the reservations whose access its node
// applies: active, or being retired.
func TestAnAgentSeesOnlyTheReservationsItServes(t *testing.T) {
	for state, servedHere := range map[nodusv1.ReservationState]bool{
		"": false, nodusv1.ReservationStatePending: false, nodusv1.ReservationStateActive: true,
		nodusv1.ReservationStateReleasing: true, nodusv1.ReservationStateReleased: false,
		nodusv1.ReservationStateEnding: true, nodusv1.ReservationStateEnded: false,
	} {
		if sees := served.Matches(fields.Set{"status.node": "gpu-00", "status.state": string(state)}); sees != servedHere {
			t.Errorf("state %q: the agent sees it: %v, want %v", state, sees, servedHere)
		}
	}
}
