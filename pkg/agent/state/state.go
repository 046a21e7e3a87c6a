// Package state is nodusd's local state: what access it applied, under
// which epoch, kept in bbolt so that it survives restarts.
//
// Schema (version 1): bucket "meta" holds key "version" = "1"; bucket
// "access" maps a reservation name to the JSON of Access. Fields added since
// (uid, retiredAt, cleanedAt, cleaningOwed, …) are optional, so version-1
// databases read as they are;
// so is bucket "rootaccess" (a login user's name to the JSON list of the
// ways it could become root when it was granted), created where missing.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

const schemaVersion = "1"

var (
	bucketMeta   = []byte("meta")
	bucketAccess = []byte("access")
	bucketRoot   = []byte("rootaccess")
)

// Access is the access state applied for one reservation.
type Access struct {
	Reservation string `json:"reservation"`
	Epoch       int64  `json:"epoch"`
	// State is the reservation state applied: active grants the login user,
	// anything else retires it.
	State     string `json:"state"`
	LoginUser string `json:"loginUser"`
	// FormerLoginUsers are the accounts this reservation granted before
	// LoginUser, the one left last at the end: the cleaning after it resets them too,
	// whether or not the reset at the change went through.
	FormerLoginUsers []string `json:"formerLoginUsers,omitempty"`
	Project          string   `json:"project"`
	// UID is the reservation object's; a reservation deleted and made again
	// under the same name is another one, whose epochs start anew.
	UID string `json:"uid,omitempty"`
	// ReplacedUIDs are the earlier objects of the name whose entries this
	// one replaced (the latest last): none of them is applied again, as a
	// view behind the store (a restart's first list from a lagging
	// replica) could offer one, active at a higher epoch than this.
	ReplacedUIDs []string `json:"replacedUIDs,omitempty"`
	// RetiredAt is when the agent retired the access on its own (the
	// reservation ended or left this node), after which the entry may be
	// forgotten.
	RetiredAt *time.Time `json:"retiredAt,omitempty"`
	// CleanedAt is when a cleaning after the reservation succeeded: until
	// then a cleaning asked again (an operator's re-clean of a failed one,
	// days later) needs the accounts the entry names.
	CleanedAt *time.Time `json:"cleanedAt,omitempty"`
	// CleaningOwed says that a tenant was let in under this access and no
	// cleaning after it succeeded yet (MarkCleaned): no other
	// reservation's access is granted meanwhile (Apply), and the entry is
	// not forgotten. Set at a grant with a login user, kept through the
	// object's later states. Entries written before session 59 lack it.
	CleaningOwed bool `json:"cleaningOwed,omitempty"`
}

// CleaningOwedError refuses an access while the tenant of another
// reservation, or of another object of the same name (one deleted and made
// again), was let in on this host and no cleaning after it succeeded: the
// server claims a host only after one, so a server at fault (or a view of
// it behind the store) is what asks.
type CleaningOwedError struct {
	// Reservation is the one whose cleaning is owed.
	Reservation string
}

func (e *CleaningOwedError) Error() string {
	return fmt.Sprintf("no cleaning succeeded on this host since the access of reservation %s: no other access is granted until one does", e.Reservation)
}

// StateRetired is recorded for a reservation that left this node: deleted,
// moved to another node, or cleaned after.
const StateRetired = "retired"

// Granted says whether the access lets the login user in.
func (a Access) Granted() bool { return a.State == "active" }

// OwesCleaning says whether a tenant was let in under the access and no
// cleaning after it succeeded: it is recorded so, or it grants a login
// user now (an access an agent before session 59 granted records nothing).
func (a Access) OwesCleaning() bool { return a.CleaningOwed || (a.Granted() && a.LoginUser != "") }

// Store is the state database.
type Store struct {
	db *bolt.DB
}

// ErrLocked says that another process holds the database.
var ErrLocked = errors.New("another nodusd holds the state database")

// Open opens (or creates) the database at path.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%s: %w", path, ErrLocked)
	}
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		switch v := string(meta.Get([]byte("version"))); v {
		case "":
			if err := meta.Put([]byte("version"), []byte(schemaVersion)); err != nil {
				return err
			}
		case schemaVersion:
		default:
			return fmt.Errorf("state schema version %s is newer than this nodusd understands (%s)", v, schemaVersion)
		}
		if _, err := tx.CreateBucketIfNotExists(bucketAccess); err != nil {
			return err
		}
		_, err = tx.CreateBucketIfNotExists(bucketRoot)
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: db}, nil
}

// OwedIn says whether the database at path records an access that owes a
// cleaning, reading it without writing: `nodusd enroll` asks before it
// enrolls the host (again). No database there owes nothing, nor an empty
// file (one a stop between its creation and its first write left: Open
// makes it a database); one another process holds is ErrLocked, one of a
// newer schema an error.
func OwedIn(path string) (bool, error) {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && info.Size() == 0) {
		return false, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if errors.Is(err, bolt.ErrTimeout) {
		return false, fmt.Errorf("%s: %w", path, ErrLocked)
	}
	if err != nil {
		return false, err
	}
	defer db.Close()
	owed := false
	err = db.View(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			if v := string(meta.Get([]byte("version"))); v != "" && v != schemaVersion {
				return fmt.Errorf("state schema version %s is newer than this nodusd understands (%s)", v, schemaVersion)
			}
		}
		access := tx.Bucket(bucketAccess)
		if access == nil {
			return nil
		}
		return access.ForEach(func(_, v []byte) error {
			var a Access
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			owed = owed || a.OwesCleaning()
			return nil
		})
	})
	return owed, err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Applied returns the access applied for a reservation.
func (s *Store) Applied(reservation string) (Access, bool, error) {
	var a Access
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		data := tx.Bucket(bucketAccess).Get([]byte(reservation))
		if data == nil {
			return nil
		}
		found = true
		return json.Unmarshal(data, &a)
	})
	return a, found, err
}

// All returns every applied access.
func (s *Store) All() ([]Access, error) {
	var all []Access
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAccess).ForEach(func(_, v []byte) error {
			var a Access
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			all = append(all, a)
			return nil
		})
	})
	return all, err
}

// Apply records a, durably, only if its epoch is newer than the one applied
// for its reservation; it reports whether it did. It refuses
// (*CleaningOwedError) an access that grants while another reservation's
// owes a cleaning, and any access of another object of a name whose entry
// owes one, which it would replace.
func (s *Store) Apply(a Access) (bool, error) {
	applied := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccess)
		a.FormerLoginUsers, a.ReplacedUIDs, a.CleaningOwed = nil, nil, false
		if data := b.Get([]byte(a.Reservation)); data != nil {
			var old Access
			if err := json.Unmarshal(data, &old); err != nil {
				return err
			}
			if a.UID != "" && slices.Contains(old.ReplacedUIDs, a.UID) {
				return nil // an earlier object of the name: never again
			}
			sameObject := a.UID == "" || old.UID == "" || a.UID == old.UID
			if !sameObject && old.OwesCleaning() {
				return &CleaningOwedError{Reservation: old.Reservation}
			}
			a.ReplacedUIDs = old.ReplacedUIDs
			if sameObject {
				a.FormerLoginUsers = formerLoginUsers(old, a.LoginUser)
				a.CleaningOwed = old.OwesCleaning()
			} else {
				a.ReplacedUIDs = replacedBy(old)
			}
			if sameObject && a.Epoch <= old.Epoch {
				if old.UID != "" || a.UID == "" || a.Epoch != old.Epoch {
					return nil
				}
				// Recorded before the UID was: learn it, since the
				// principal names it; the access applied stays as it is.
				old.UID = a.UID
				data, err := json.Marshal(old)
				if err != nil {
					return err
				}
				return b.Put([]byte(a.Reservation), data)
			}
		}
		if a.Granted() {
			if err := owedBesides(b, a.Reservation); err != nil {
				return err
			}
			a.CleaningOwed = a.CleaningOwed || a.LoginUser != ""
		}
		data, err := json.Marshal(a)
		if err != nil {
			return err
		}
		applied = true
		return b.Put([]byte(a.Reservation), data)
	})
	return applied, err
}

// MayGrant says, as Apply would, whether a's access may be granted now:
// nil, or a *CleaningOwedError. An access Apply would not record (an
// earlier object of the name, an epoch not newer) is not refused: it
// changes nothing. Apply checks again as it records.
func (s *Store) MayGrant(a Access) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccess)
		if data := b.Get([]byte(a.Reservation)); data != nil {
			var old Access
			if err := json.Unmarshal(data, &old); err != nil {
				return err
			}
			if a.UID != "" && slices.Contains(old.ReplacedUIDs, a.UID) {
				return nil
			}
			sameObject := a.UID == "" || old.UID == "" || a.UID == old.UID
			if !sameObject && old.OwesCleaning() {
				return &CleaningOwedError{Reservation: old.Reservation}
			}
			if sameObject && a.Epoch <= old.Epoch {
				return nil
			}
		}
		return owedBesides(b, a.Reservation)
	})
}

// owedBesides refuses while an entry of another name than reservation
// owes a cleaning.
func owedBesides(b *bolt.Bucket, reservation string) error {
	return b.ForEach(func(k, v []byte) error {
		if string(k) == reservation {
			return nil
		}
		var e Access
		if err := json.Unmarshal(v, &e); err != nil {
			return err
		}
		if e.OwesCleaning() {
			return &CleaningOwedError{Reservation: e.Reservation}
		}
		return nil
	})
}

// Owed returns the accesses that owe a cleaning and grant nothing now:
// what the next cleaning resets and, once it succeeds, marks cleaned.
func (s *Store) Owed() ([]Access, error) {
	all, err := s.All()
	return slices.DeleteFunc(all, func(a Access) bool { return !a.CleaningOwed || a.Granted() }), err
}

// maxReplacedUIDs bounds the earlier objects an entry remembers (each a
// reservation deleted and made again under the name).
const maxReplacedUIDs = 16

// replacedBy is what the entry of an object that replaces old's remembers
// of the objects before it: old's and those old replaced.
func replacedBy(old Access) []string {
	replaced := append(slices.Clone(old.ReplacedUIDs), old.UID)
	if len(replaced) > maxReplacedUIDs {
		replaced = replaced[len(replaced)-maxReplacedUIDs:]
	}
	return replaced
}

// maxFormerLoginUsers bounds what an access remembers of its login users
// (each change is an operator's): past it the oldest are dropped, whose
// accounts were reset when the login user changed.
const maxFormerLoginUsers = 32

// formerLoginUsers are old's former login users and its own, as the access
// of loginUser that follows it remembers them.
func formerLoginUsers(old Access, loginUser string) []string {
	former := slices.Clone(old.FormerLoginUsers)
	if old.LoginUser != "" && !slices.Contains(former, old.LoginUser) {
		former = append(former, old.LoginUser)
	}
	former = slices.DeleteFunc(former, func(u string) bool { return u == loginUser })
	if len(former) > maxFormerLoginUsers {
		former = former[len(former)-maxFormerLoginUsers:]
	}
	if len(former) == 0 {
		return nil
	}
	return former
}

// Retire ends the access of a reservation that left this node, whatever its
// epoch: from now on it grants nothing. epoch, when higher than the one
// applied, is recorded (the server's final epoch of the reservation), so a
// late event of the old epoch cannot grant it again. uid, when known, is
// the object's, recorded where nothing of the name was: another object made
// later under the name is then told from it. It returns the access as it
// was before, and whether it retired it.
//
// An entry of another object than uid is the name's before uid's (its
// object is gone, or uid would not be retiring) unless it replaced uid.
// The former passes to uid, retired at its final epoch, as Apply replaces
// an object: it keeps what is owed and the login users to reset, and the
// object before is never applied again. The latter, an object made later
// under the name, is left as it is, and an access of uid alone, which
// grants nothing, is returned.
func (s *Store) Retire(reservation, uid string, epoch int64, now time.Time) (Access, bool, error) {
	var before Access
	retired := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccess)
		a := Access{Reservation: reservation}
		data := b.Get([]byte(reservation))
		if data != nil {
			if err := json.Unmarshal(data, &a); err != nil {
				return err
			}
		}
		anotherObject := uid != "" && a.UID != "" && uid != a.UID
		if anotherObject && slices.Contains(a.ReplacedUIDs, uid) {
			before = Access{Reservation: reservation, UID: uid}
			return nil
		}
		before = a
		if data == nil {
			a.UID = uid
		}
		if anotherObject {
			a = Access{Reservation: reservation, UID: uid, Project: a.Project, FormerLoginUsers: formerLoginUsers(a, ""),
				ReplacedUIDs: replacedBy(a), CleaningOwed: a.OwesCleaning()}
		}
		a.Epoch = max(a.Epoch, epoch)
		a.CleaningOwed = a.OwesCleaning()
		a.State = StateRetired
		if a.RetiredAt == nil {
			a.RetiredAt = &now
		}
		data, err := json.Marshal(a)
		if err != nil {
			return err
		}
		retired = true
		return b.Put([]byte(reservation), data)
	})
	return before, retired, err
}

// MarkCleaned records that a cleaning after reservations succeeded, which
// discharges the cleaning they owe and lets Forget drop their entries. One
// granted again since keeps what it owes: the cleaning was of an earlier
// grant.
func (s *Store) MarkCleaned(reservations []string, now time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccess)
		for _, name := range reservations {
			data := b.Get([]byte(name))
			if data == nil {
				continue
			}
			var a Access
			if err := json.Unmarshal(data, &a); err != nil {
				return err
			}
			if a.Granted() {
				continue
			}
			a.CleanedAt, a.CleaningOwed = &now, false
			data, err := json.Marshal(a)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(name), data); err != nil {
				return err
			}
		}
		return nil
	})
}

// ForgetUncleanedAfter bounds how long an entry of an agent before session
// 59 whose cleaning never succeeded is kept: the state stays bounded when
// no cleaning comes (the node deleted and its machine enrolled again, say).
// One that owes a cleaning is kept until one succeeds.
const ForgetUncleanedAfter = 30 * 24 * time.Hour

// Forget drops the entries that keep reservations retired for longer than
// keep and cleaned after, which no longer need remembering, and those
// retired longer than ForgetUncleanedAfter that owe no cleaning (written
// before session 59): the state stays bounded. One that owes a cleaning
// stays until one succeeds; no other tenant is let in meanwhile.
func (s *Store) Forget(current func(reservation string) bool, keep time.Duration, now time.Time) (int, error) {
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAccess)
		var drop [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var a Access
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			if !a.Granted() && !a.CleaningOwed && a.RetiredAt != nil && now.Sub(*a.RetiredAt) > keep && !current(a.Reservation) &&
				(a.CleanedAt != nil || now.Sub(*a.RetiredAt) > ForgetUncleanedAfter) {
				drop = append(drop, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range drop {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(drop)
		return nil
	})
	return n, err
}

// RecordRootAccess keeps, durably, ways login user could become root, to
// those recorded before: what the host allowed it when it was granted,
// which its tenant could take away before the cleaning looks.
func (s *Store) RecordRootAccess(user string, ways []string) error {
	if len(ways) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRoot)
		var known []string
		if data := b.Get([]byte(user)); data != nil {
			if err := json.Unmarshal(data, &known); err != nil {
				return err
			}
		}
		changed := false
		for _, w := range ways {
			if !slices.Contains(known, w) {
				known, changed = append(known, w), true
			}
		}
		if !changed {
			return nil
		}
		data, err := json.Marshal(known)
		if err != nil {
			return err
		}
		return b.Put([]byte(user), data)
	})
}

// RootAccess is what RecordRootAccess kept for user.
func (s *Store) RootAccess(user string) ([]string, error) {
	var known []string
	err := s.db.View(func(tx *bolt.Tx) error {
		if data := tx.Bucket(bucketRoot).Get([]byte(user)); data != nil {
			return json.Unmarshal(data, &known)
		}
		return nil
	})
	return known, err
}

// ForgetRootAccess drops what was kept for user: a cleaning whose command
// restored the host succeeded after it.
func (s *Store) ForgetRootAccess(user string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRoot).Delete([]byte(user)) })
}
