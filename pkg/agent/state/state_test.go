package state

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestApplyIsFencedByEpochAndSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a    Access
		want bool
	}{
		{Access{Reservation: "r1", Epoch: 1, State: "active", LoginUser: "ubuntu"}, true},
		{Access{Reservation: "r1", Epoch: 1, State: "releasing"}, false}, // same epoch: not newer
		{Access{Reservation: "r1", Epoch: 3, State: "releasing"}, true},
		{Access{Reservation: "r1", Epoch: 2, State: "active"}, false}, // older: never goes back
	} {
		if got, err := s.Apply(tc.a); err != nil || got != tc.want {
			t.Errorf("apply %+v: %v %v, want %v", tc.a, got, err, tc.want)
		}
	}
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Errorf("a second opener must be told the database is locked, got %v", err)
	}
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, ok, err := s.Applied("r1")
	if err != nil || !ok || a.Epoch != 3 || a.Granted() {
		t.Errorf("after reopen: %+v %v %v", a, ok, err)
	}
}
