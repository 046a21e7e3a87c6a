package validation

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Every time ValidateTimes lets through comes back from its JSON form, and
// every time it refuses does not: the store decodes what it writes.
func TestATimeIsRefusedExactlyWhenItsJSONCannotComeBack(t *testing.T) {
	for _, sent := range []string{
		"2026-12-06T10:00:00Z", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z", "0000-01-01T01:00:00+01:00",
		"9999-12-31T23:00:00-02:00", "0000-01-01T00:00:00+02:00", "9999-12-31T23:59:59-00:01",
	} {
		var at metav1.Time
		if err := json.Unmarshal([]byte(`"`+sent+`"`), &at); err != nil {
			t.Fatalf("%s: %v", sent, err)
		}
		r := &nodusv1.Reservation{Spec: nodusv1.ReservationSpec{EndsAt: at}}
		errs := ValidateTimes(r)
		data, _ := json.Marshal(at)
		var back metav1.Time
		comesBack := json.Unmarshal(data, &back) == nil
		if comesBack != (len(errs) == 0) {
			t.Errorf("%s (written %s): refused %v, but its JSON comes back: %v", sent, data, errs, comesBack)
		}
		if len(errs) > 0 && errs[0].Field != "spec.endsAt" {
			t.Errorf("%s: refused at %s, want spec.endsAt", sent, errs[0].Field)
		}
	}
}

func TestATimeIsNamedWhereverItIs(t *testing.T) {
	far := metav1.NewTime(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	r := &nodusv1.Reservation{
		ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "a"}, {Manager: "b", Time: &far}}},
		Status: nodusv1.ReservationStatus{EndedAt: &far,
			Conditions: []metav1.Condition{{Type: "A"}, {Type: "B", LastTransitionTime: far}}},
	}
	var got []string
	for _, err := range ValidateTimes(r) {
		got = append(got, err.Field)
	}
	want := "metadata.managedFields[1].time status.endedAt status.conditions[1].lastTransitionTime"
	if strings.Join(got, " ") != want {
		t.Errorf("refused %v, want %s", got, want)
	}
	r.ManagedFields[1].Time, r.Status.EndedAt, r.Status.Conditions[1].LastTransitionTime = nil, nil, metav1.Now()
	if errs := ValidateTimes(r); len(errs) > 0 {
		t.Errorf("times that come back refused: %v", errs)
	}
}

// What the check adds to every write: a node as the fleet's are, with its
// conditions, eight GPUs and three managers' fields.
func BenchmarkValidateTimesOfANode(b *testing.B) {
	now := metav1.Now()
	n := &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-01", CreationTimestamp: now,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "a", Time: &now}, {Manager: "b", Time: &now}, {Manager: "c", Time: &now}}}}
	n.Status.LastHeartbeatTime = &now
	for i := 0; i < 4; i++ {
		n.Status.Conditions = append(n.Status.Conditions, metav1.Condition{Type: "C", LastTransitionTime: now})
	}
	for i := 0; i < 8; i++ {
		n.Status.Inventory.GPUs = append(n.Status.Inventory.GPUs, nodusv1.NodeGPU{Type: "h100"})
	}
	b.ReportAllocs()
	for b.Loop() {
		if errs := ValidateTimes(n); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}
