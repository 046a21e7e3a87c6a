package nodeliveness

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestARecordedBeatOnlyMovesForward: a replica records the last beat it
// heard only over an earlier stored one; a later stored time (another
// replica's beat, or a beat that wrote the node since) stays.
func TestARecordedBeatOnlyMovesForward(t *testing.T) {
	stored := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		stored   *time.Time
		lastBeat time.Time
		want     *time.Time
	}{
		{"none stored", nil, stored.Add(1500 * time.Millisecond), ptr(stored.Add(time.Second))},
		{"a later beat", &stored, stored.Add(5 * time.Second), ptr(stored.Add(5 * time.Second))},
		{"the same second", &stored, stored.Add(900 * time.Millisecond), &stored},
		{"an earlier beat", &stored, stored.Add(-time.Minute), &stored},
		{"no beat heard", &stored, time.Time{}, &stored},
		{"no beat heard, none stored", nil, time.Time{}, nil},
	}
	for _, tc := range cases {
		n := &nodusv1.Node{}
		if tc.stored != nil {
			n.Status.LastHeartbeatTime = &metav1.Time{Time: *tc.stored}
		}
		changed := recordBeat(n, tc.lastBeat)
		got := n.Status.LastHeartbeatTime
		switch {
		case tc.want == nil && got != nil, tc.want != nil && (got == nil || !got.Time.Equal(*tc.want)):
			t.Errorf("%s: lastHeartbeatTime %v, want %v", tc.name, got, tc.want)
		case changed != (tc.want != nil && (tc.stored == nil || !tc.want.Equal(*tc.stored))):
			t.Errorf("%s: recordBeat said changed = %v", tc.name, changed)
		}
	}
}

func ptr(t time.Time) *time.Time { return &t }
