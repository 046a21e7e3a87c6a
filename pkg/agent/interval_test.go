package agent

import (
	"math"
	"testing"
	"time"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestTheServersIntervalIsBounded: nodusd took the heartbeat interval of
// the server's answer as it came, up to 68 years. A beat is also when the
// agent ends the late sessions of an access that ended, so a server (or
// something between) that answered a long interval stopped that sweep, and
// with it a defence of the next tenant. The agent keeps to the bound a
// server may set.
func TestTheServersIntervalIsBounded(t *testing.T) {
	a := &Agent{interval: 10 * time.Second}
	for _, c := range []struct {
		seconds int32
		want    time.Duration
	}{
		{5, 5 * time.Second},
		{0, 5 * time.Second}, // none given: the last one stays
		{-3, 5 * time.Second},
		{math.MaxInt32, nodusv1.MaxHeartbeatIntervalSeconds * time.Second},
		{1, time.Second},
		{nodusv1.MaxHeartbeatIntervalSeconds + 1, nodusv1.MaxHeartbeatIntervalSeconds * time.Second},
		{nodusv1.MaxHeartbeatIntervalSeconds, nodusv1.MaxHeartbeatIntervalSeconds * time.Second},
	} {
		a.heard(&nodusv1.NodeHeartbeat{IntervalSeconds: c.seconds})
		if got := a.currentInterval(); got != c.want {
			t.Errorf("after an answer of %d s the interval is %s, want %s", c.seconds, got, c.want)
		}
	}
}
