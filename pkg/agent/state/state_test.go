package state

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
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

func TestRetireAndForget(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Apply(Access{Reservation: "r1", UID: "u1", Epoch: 3, State: "active", LoginUser: "ubuntu"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	before, _, err := s.Retire("r1", "", 0, now)
	if err != nil || before.LoginUser != "ubuntu" || !before.Granted() {
		t.Fatalf("retire: %+v %v", before, err)
	}
	a, _, _ := s.Applied("r1")
	if a.Granted() || a.Epoch != 3 || a.LoginUser != "ubuntu" {
		t.Errorf("retired: %+v", a)
	}
	if ok, _ := s.Apply(Access{Reservation: "r1", UID: "u1", Epoch: 3, State: "active"}); ok {
		t.Error("the epoch it was retired at granted it again")
	}
	// After the cleaning it owes (TestNoOtherAccessIsGrantedWhileACleaningIsOwed).
	if err := s.MarkCleaned([]string{"r1"}, now); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Apply(Access{Reservation: "r1", UID: "u2", Epoch: 1, State: "active"}); !ok {
		t.Error("a reservation made again under the same name starts anew")
	}
	if _, _, err := s.Retire("r1", "", 9, now); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := s.Applied("r1"); a.Epoch != 9 {
		t.Errorf("the server's final epoch is kept: %+v", a)
	}
	if n, _ := s.Forget(func(string) bool { return false }, time.Hour, now); n != 0 {
		t.Errorf("forgot %d entries retired a moment ago", n)
	}
	if n, _ := s.Forget(func(string) bool { return true }, time.Hour, now.Add(2*time.Hour)); n != 0 {
		t.Errorf("forgot %d current reservations", n)
	}
	// Not cleaned yet: a cleaning asked again later (a re-clean of a
	// failed one) needs the accounts it names.
	if n, _ := s.Forget(func(string) bool { return false }, time.Hour, now.Add(48*time.Hour)); n != 0 {
		t.Errorf("forgot %d entries whose cleaning never succeeded", n)
	}
	if err := s.MarkCleaned([]string{"r1"}, now.Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Forget(func(string) bool { return false }, time.Hour, now.Add(49*time.Hour)); n != 1 {
		t.Errorf("forgot %d, want 1", n)
	}
	if all, _ := s.All(); len(all) != 0 {
		t.Errorf("left: %+v", all)
	}
	// One never cleaned that owes no cleaning (an older agent's) goes after
	// ForgetUncleanedAfter; one that owes a cleaning stays.
	if _, err := s.Apply(Access{Reservation: "r2", UID: "u3", Epoch: 1, State: "active", LoginUser: "ubuntu"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Retire("r2", "", 2, now); err != nil {
		t.Fatal(err)
	}
	older := `{"reservation":"r3","uid":"u4","epoch":3,"state":"retired","loginUser":"bob","retiredAt":"` + now.Format(time.RFC3339Nano) + `"}`
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketAccess).Put([]byte("r3"), []byte(older)) }); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Forget(func(string) bool { return false }, time.Hour, now.Add(ForgetUncleanedAfter+time.Hour)); n != 1 {
		t.Errorf("forgot %d uncleaned entries past the bound, want 1", n)
	}
	if all, _ := s.All(); len(all) != 1 || all[0].Reservation != "r2" {
		t.Errorf("left past the bound: %+v, want r2, which owes a cleaning", all)
	}
}

// TestApplyLearnsTheUID: an access recorded before the UID was (an older
// nodusd) learns it at the same epoch, since the principal names it, and
// stays applied as it was.
func TestApplyLearnsTheUID(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Apply(Access{Reservation: "r1", Epoch: 2, State: "active", LoginUser: "ubuntu"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Apply(Access{Reservation: "r1", UID: "u1", Epoch: 2, State: "active", LoginUser: "ubuntu"}); ok || err != nil {
		t.Errorf("the same epoch counted as newer: %v %v", ok, err)
	}
	if a, _, _ := s.Applied("r1"); a.UID != "u1" || a.Epoch != 2 || !a.Granted() {
		t.Errorf("after the same epoch with its UID: %+v", a)
	}
	if ok, _ := s.Apply(Access{Reservation: "r1", UID: "u1", Epoch: 1, State: "ended"}); ok {
		t.Error("an older epoch was applied")
	}
	if a, _, _ := s.Applied("r1"); a.State != "active" {
		t.Errorf("an older epoch changed the access: %+v", a)
	}
}

// TestAnEarlierObjectOfTheNameIsNeverAppliedAgain: a reservation deleted
// and made again under its name is another object, whose entry replaces
// the earlier one's whatever the epochs. A view behind the store (an
// agent's first list after a restart, from a replica that lags) offering
// the earlier one again, active at a higher epoch, replaced the later
// one's retirement with a grant.
func TestAnEarlierObjectOfTheNameIsNeverAppliedAgain(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	apply := func(uid string, epoch int64, state string) bool {
		t.Helper()
		ok, err := s.Apply(Access{Reservation: "r1", UID: uid, Epoch: epoch, State: state, LoginUser: "ubuntu"})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// Each followed by its cleaning, as the server orders them.
	cleaned := func(epoch int64) {
		t.Helper()
		if _, _, err := s.Retire("r1", "", epoch, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkCleaned([]string{"r1"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if !apply("earlier", 5, "active") {
		t.Fatal("not applied")
	}
	cleaned(5)
	if !apply("later", 1, "active") {
		t.Fatal("a reservation made again under the name did not replace the earlier one's entry")
	}
	cleaned(2)
	for _, epoch := range []int64{5, 6} {
		if apply("earlier", epoch, "active") {
			t.Errorf("the earlier object was applied again at epoch %d", epoch)
		}
	}
	if a, _, _ := s.Applied("r1"); a.UID != "later" || a.Granted() {
		t.Errorf("the entry after the earlier object came back: %+v", a)
	}
	if !apply("another", 1, "active") {
		t.Error("a third object of the name was not applied")
	}
	if a, _, _ := s.Applied("r1"); !slices.Equal(a.ReplacedUIDs, []string{"earlier", "later"}) {
		t.Errorf("the objects the entry replaced: %v", a.ReplacedUIDs)
	}
}

// TestRootAccessIsKeptUntilForgotten: the ways a login user could become
// root when granted add up across grants and restarts, and stay until a
// cleaning forgets them; a database without the bucket (older nodusd)
// gets it on open.
func TestRootAccessIsKeptUntilForgotten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketRoot) }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	for _, ways := range [][]string{{"member of group sudo"}, nil, {"member of group sudo", "member of group docker"}} {
		if err := s.RecordRootAccess("ubuntu", ways); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.RootAccess("ubuntu"); err != nil || !slices.Equal(got, []string{"member of group sudo", "member of group docker"}) {
		t.Errorf("kept: %q %v", got, err)
	}
	if got, err := s.RootAccess("other"); err != nil || got != nil {
		t.Errorf("kept for a user never recorded: %q %v", got, err)
	}
	if err := s.ForgetRootAccess("ubuntu"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.RootAccess("ubuntu"); err != nil || got != nil {
		t.Errorf("after forgetting: %q %v", got, err)
	}
}

// A reservation whose login user changed names its former accounts until
// it is forgotten: the cleaning after it resets them too, whether or not
// the reset at the change went through.
func TestAppliedAccessKeepsItsFormerLoginUsers(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, a := range []Access{
		{Reservation: "r1", UID: "u1", Epoch: 1, State: "active", LoginUser: "bob"},
		{Reservation: "r1", UID: "u1", Epoch: 2, State: "active", LoginUser: "alice"},
		{Reservation: "r1", UID: "u1", Epoch: 3, State: "active", LoginUser: "bob"},
		{Reservation: "r1", UID: "u1", Epoch: 4, State: "active", LoginUser: "carol"},
	} {
		if _, err := s.Apply(a); err != nil {
			t.Fatal(err)
		}
	}
	before, _, err := s.Retire("r1", "", 5, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if before.LoginUser != "carol" || !slices.Equal(before.FormerLoginUsers, []string{"alice", "bob"}) {
		t.Errorf("before the retirement: login user %q, former %v, want carol and [alice bob]", before.LoginUser, before.FormerLoginUsers)
	}
	if a, _, _ := s.Applied("r1"); !slices.Equal(a.FormerLoginUsers, []string{"alice", "bob"}) {
		t.Errorf("the retirement dropped the former login users: %v", a.FormerLoginUsers)
	}
	// Another reservation under the same name is another object: nothing
	// of the old one's, once the cleaning it owes succeeded.
	if err := s.MarkCleaned([]string{"r1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(Access{Reservation: "r1", UID: "u2", Epoch: 1, State: "active", LoginUser: "dave"}); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := s.Applied("r1"); len(a.FormerLoginUsers) != 0 {
		t.Errorf("a new reservation under the name inherits former login users %v", a.FormerLoginUsers)
	}
}

// TestNoOtherAccessIsGrantedWhileACleaningIsOwed: nodusd granted a
// reservation whenever the server showed it active, so the server's order
// (no claim before a succeeded cleaning) was all that kept a tenant's
// leftovers from the next: a server at fault could have handed a host
// over uncleaned. A tenant's access owes a cleaning from its grant until
// one succeeds (MarkCleaned), and no other reservation's access is granted
// meanwhile; the store holds it, in the transaction that would grant.
func TestNoOtherAccessIsGrantedWhileACleaningIsOwed(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustApply := func(a Access) {
		t.Helper()
		if ok, err := s.Apply(a); !ok || err != nil {
			t.Fatalf("apply %+v: %v %v", a, ok, err)
		}
	}
	refused := func(a Access, what string) {
		t.Helper()
		var owed *CleaningOwedError
		if ok, err := s.Apply(a); ok || !errors.As(err, &owed) || owed.Reservation != "r1" {
			t.Errorf("%s: %v %v, want refused for r1's cleaning", what, ok, err)
		}
	}
	mustApply(Access{Reservation: "r1", UID: "u1", Epoch: 1, State: "active", LoginUser: "bob"})
	// Its own access goes on changing.
	mustApply(Access{Reservation: "r1", UID: "u1", Epoch: 2, State: "active", LoginUser: "alice"})
	refused(Access{Reservation: "r2", UID: "u2", Epoch: 1, State: "active", LoginUser: "carol"}, "another reservation while r1 is granted")
	if _, _, err := s.Retire("r1", "", 3, time.Now()); err != nil {
		t.Fatal(err)
	}
	refused(Access{Reservation: "r2", UID: "u2", Epoch: 1, State: "active", LoginUser: "carol"}, "another reservation before r1's cleaning")
	refused(Access{Reservation: "r1", UID: "u3", Epoch: 1, State: "active", LoginUser: "carol"}, "r1 made again before its cleaning")
	// Not granting, the name made again would still replace the entry
	// that names what the cleaning must reset.
	refused(Access{Reservation: "r1", UID: "u3", Epoch: 1, State: "pending"}, "r1 made again, not granted, before its cleaning")
	// Another name that grants nothing is recorded: its epoch fences.
	mustApply(Access{Reservation: "r2", UID: "u2", Epoch: 1, State: "pending", LoginUser: "carol"})
	if owed, err := s.Owed(); err != nil || len(owed) != 1 || owed[0].Reservation != "r1" || !slices.Equal(owed[0].FormerLoginUsers, []string{"bob"}) {
		t.Errorf("owed: %+v %v, want r1 (alice, and bob before her)", owed, err)
	}
	// Never forgotten while owed, however long no cleaning comes.
	if n, _ := s.Forget(func(string) bool { return false }, time.Hour, time.Now().Add(2*ForgetUncleanedAfter)); n != 0 {
		t.Errorf("forgot %d entries owing a cleaning", n)
	}
	if err := s.MarkCleaned([]string{"r1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if owed, err := s.Owed(); err != nil || len(owed) != 0 {
		t.Errorf("owed after the cleaning: %+v %v", owed, err)
	}
	mustApply(Access{Reservation: "r2", UID: "u2", Epoch: 2, State: "active", LoginUser: "carol"})
	// A cleaning while it is granted discharges nothing of its.
	if err := s.MarkCleaned([]string{"r2"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if owed, _ := s.Owed(); len(owed) != 0 {
		t.Errorf("a granted access is listed as owing a cleaning: %+v", owed)
	}
	refused2 := func(a Access) {
		t.Helper()
		var owed *CleaningOwedError
		if _, err := s.Apply(a); !errors.As(err, &owed) || owed.Reservation != "r2" {
			t.Errorf("apply %+v while r2 owes its cleaning: %v", a, err)
		}
	}
	if _, _, err := s.Retire("r2", "", 3, time.Now()); err != nil {
		t.Fatal(err)
	}
	refused2(Access{Reservation: "r1", UID: "u3", Epoch: 1, State: "active", LoginUser: "bob"})
}

// TestAnEntryOfAnOlderAgentOwesNoCleaning: entries written before nodusd
// recorded what a cleaning is owed for (session 59) hold no grant up: the
// server's cleanings after them are not on record.
func TestAnEntryOfAnOlderAgentOwesNoCleaning(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old := `{"reservation":"r1","uid":"u1","epoch":3,"state":"retired","loginUser":"bob","project":"p","retiredAt":"2026-12-01T00:00:00Z"}`
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketAccess).Put([]byte("r1"), []byte(old)) }); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Apply(Access{Reservation: "r2", UID: "u2", Epoch: 1, State: "active", LoginUser: "carol"}); !ok || err != nil {
		t.Errorf("a grant after an older agent's entry: %v %v", ok, err)
	}
}

// TestMayGrantAsApplyWould: the check before an access touches the
// account refuses what Apply would refuse, and not what Apply would not
// record at all (a repeat of a granted access while another owes a
// cleaning was refused, and its tenant shown a refusal of an access it
// has).
func TestMayGrantAsApplyWould(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Granted while another owes a cleaning: only an agent before session
	// 59 (or a server at fault before it) could have let it come to this.
	put := func(name, entry string) {
		t.Helper()
		if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketAccess).Put([]byte(name), []byte(entry)) }); err != nil {
			t.Fatal(err)
		}
	}
	put("r1", `{"reservation":"r1","uid":"u1","epoch":3,"state":"active","loginUser":"bob","replacedUIDs":["u0"]}`)
	if _, err := s.Apply(Access{Reservation: "r2", UID: "u2", Epoch: 1, State: "active", LoginUser: "carol"}); err == nil {
		t.Fatal("a grant beside another that an older agent granted: the access granted now owes its cleaning")
	}
	put("r3", `{"reservation":"r3","uid":"u3","epoch":2,"state":"retired","loginUser":"eve","cleaningOwed":true}`)
	for _, tc := range []struct {
		a       Access
		refused bool
	}{
		{Access{Reservation: "r1", UID: "u1", Epoch: 3, State: "active", LoginUser: "bob"}, false}, // a repeat
		{Access{Reservation: "r1", UID: "u0", Epoch: 9, State: "active", LoginUser: "bob"}, false}, // an earlier object
		{Access{Reservation: "r1", UID: "u1", Epoch: 4, State: "active", LoginUser: "bob"}, true},  // its own, newer, while r3 owes
		{Access{Reservation: "r1", UID: "u9", Epoch: 1, State: "active", LoginUser: "dan"}, true},  // a later object
		{Access{Reservation: "r2", UID: "u2", Epoch: 1, State: "active", LoginUser: "carol"}, true},
	} {
		err := s.MayGrant(tc.a)
		var owed *CleaningOwedError
		if refused := errors.As(err, &owed); refused != tc.refused || (err != nil && !refused) {
			t.Errorf("MayGrant %+v: %v, want refused %v", tc.a, err, tc.refused)
		}
		ok, err := s.Apply(tc.a)
		if refused := errors.As(err, &owed); refused != tc.refused || (err != nil && !refused) {
			t.Errorf("Apply %+v: %v %v, want refused %v", tc.a, ok, err, tc.refused)
		}
	}
	// Retired, it owes its cleaning on record.
	if _, _, err := s.Retire("r1", "", 5, time.Now()); err != nil {
		t.Fatal(err)
	}
	if owed, err := s.Owed(); err != nil || len(owed) != 2 || owed[0].Reservation != "r1" {
		t.Errorf("owed after an older agent's grant retired: %+v %v, want r1 and r3", owed, err)
	}
}

// TestANameRetiredBeforeItWasAppliedIsTold: a reservation the agent never
// applied (refused, then deleted) left an entry of its name with no UID
// at the final epoch; made again under its name, the new object's epoch 1
// counted as an old one of the same object, and its access was never
// applied, with nothing said. The deleted object's UID is recorded now.
func TestANameRetiredBeforeItWasAppliedIsTold(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Retire("r1", "u1", 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Retire("r1", "", 4, time.Now()); err != nil { // the cleaning's, at the final epoch
		t.Fatal(err)
	}
	if err := s.MarkCleaned([]string{"r1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Apply(Access{Reservation: "r1", UID: "u2", Epoch: 1, State: "active", LoginUser: "bob"}); !ok || err != nil {
		t.Errorf("the name made again: %v %v", ok, err)
	}
	if ok, err := s.Apply(Access{Reservation: "r1", UID: "u1", Epoch: 4, State: "active", LoginUser: "bob"}); ok || err != nil {
		t.Errorf("the deleted object at its final epoch: %v %v", ok, err)
	}
}

// TestOwedInReadsWhatAnEnrollmentReports: `nodusd enroll` reports whether
// the state directory it enrolls owes a cleaning, without writing the
// database, and is told when a nodusd holds it.
func TestOwedInReadsWhatAnEnrollmentReports(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	owed := func(what string, want bool) {
		t.Helper()
		if got, err := OwedIn(path); err != nil || got != want {
			t.Errorf("%s: owed %v (%v), want %v", what, got, err, want)
		}
	}
	owed("no database", false)
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("asking made a database: %v", err)
	}
	// What a stop between the file's creation and its first write leaves.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	owed("an empty file", false)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OwedIn(path); !errors.Is(err, ErrLocked) {
		t.Errorf("a database nodusd holds: %v, want ErrLocked", err)
	}
	s.Close()
	owed("an empty database", false)
	reopen := func() *Store {
		t.Helper()
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s = reopen()
	if ok, err := s.Apply(Access{Reservation: "r1", UID: "u1", Epoch: 1, State: "pending"}); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	s.Close()
	owed("an access that let no one in", false)
	s = reopen()
	if ok, err := s.Apply(Access{Reservation: "r1", UID: "u1", Epoch: 2, State: "active", LoginUser: "bob"}); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	s.Close()
	owed("a granted access", true)
	s = reopen()
	if _, _, err := s.Retire("r1", "u1", 3, time.Now()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	owed("a retired access not cleaned after", true)
	s = reopen()
	if err := s.MarkCleaned([]string{"r1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	owed("a cleaned access", false)

	newer := filepath.Join(dir, "newer.db")
	db, err := bolt.Open(newer, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		return meta.Put([]byte("version"), []byte("2"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := OwedIn(newer); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("a database of a newer schema: %v, want it refused", err)
	}
}

// TestARetirementOfAnotherObject: a retirement that names another object
// of the name than the entry's leaves an entry of an object made later
// (one that replaced it) as it is, and retires one of an object made
// before, whose object is gone, at its own epoch: another reservation's
// final epoch would hide its own object's events.
func TestARetirementOfAnotherObject(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	retire := func(name, uid string, epoch int64, wantRetired bool) Access {
		t.Helper()
		before, retired, err := s.Retire(name, uid, epoch, time.Now())
		if err != nil || retired != wantRetired {
			t.Fatalf("retire %s of %q at %d: retired %v (%v), want %v", name, uid, epoch, retired, err, wantRetired)
		}
		return before
	}
	applied := func(name string) Access {
		t.Helper()
		a, ok, err := s.Applied(name)
		if err != nil || !ok {
			t.Fatalf("the entry of %s: %v %v", name, ok, err)
		}
		return a
	}

	// An entry of an object made later under the name, which replaced the
	// one a late retirement names.
	if ok, err := s.Apply(Access{Reservation: "r1", UID: "u1", Epoch: 1, State: "pending"}); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	if ok, err := s.Apply(Access{Reservation: "r1", UID: "u2", Epoch: 1, State: "active", LoginUser: "bob"}); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	if before := retire("r1", "u1", 7, false); before.LoginUser != "" || before.UID != "u1" || before.Epoch != 0 {
		t.Errorf("the retirement of the object replaced was told of the entry's access: %+v", before)
	}
	if a := applied("r1"); !a.Granted() || a.UID != "u2" || a.Epoch != 1 || a.RetiredAt != nil {
		t.Errorf("the entry after the retirement of the object it replaced: %+v", a)
	}

	// The entry's own object, or one not named, is retired at the final
	// epoch.
	if before := retire("r1", "u2", 3, true); before.LoginUser != "bob" {
		t.Errorf("the retirement of the entry's own object was not told of its access: %+v", before)
	}
	if a := applied("r1"); a.Granted() || a.Epoch != 3 || a.UID != "u2" {
		t.Errorf("the entry after its own object's retirement: %+v", a)
	}
	retire("r1", "", 4, true)
	if a := applied("r1"); a.Granted() || a.Epoch != 4 {
		t.Errorf("the entry after a retirement that names no object: %+v", a)
	}

	// An entry of an object made before the one a retirement names (a
	// watch that merged a deletion and a creation, the new object refused
	// while the old one owes a cleaning): the old object is gone, and the
	// entry passes to the new one, retired at its final epoch, with what
	// the old one owes and the login user to reset; neither is applied
	// again.
	s2, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	s = s2
	if ok, err := s.Apply(Access{Reservation: "r2", UID: "u3", Epoch: 2, State: "active", LoginUser: "carol"}); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	if ok, err := s.Apply(Access{Reservation: "r2", UID: "u4", Epoch: 1, State: "active", LoginUser: "dave"}); ok || err == nil {
		t.Fatalf("another object of the name while the first owes a cleaning: %v %v", ok, err)
	}
	if before := retire("r2", "u4", 5, true); before.LoginUser != "carol" || before.UID != "u3" {
		t.Errorf("the retirement of the object after it was not told of the entry's access: %+v", before)
	}
	a := applied("r2")
	if a.Granted() || a.UID != "u4" || a.Epoch != 5 || !a.OwesCleaning() || !slices.Equal(a.FormerLoginUsers, []string{"carol"}) ||
		!slices.Equal(a.ReplacedUIDs, []string{"u3"}) {
		t.Errorf("the entry after the retirement of the object made after it: %+v", a)
	}
	for _, again := range []Access{
		{Reservation: "r2", UID: "u3", Epoch: 3, State: "active", LoginUser: "carol"},
		{Reservation: "r2", UID: "u4", Epoch: 5, State: "active", LoginUser: "dave"},
	} {
		if ok, err := s.Apply(again); ok || err != nil {
			t.Errorf("%s applied again after the retirement: %v %v", again.UID, ok, err)
		}
	}
	if owed, err := s.Owed(); err != nil || len(owed) != 1 || owed[0].UID != "u4" {
		t.Errorf("what is owed after the retirement: %+v %v", owed, err)
	}
}
