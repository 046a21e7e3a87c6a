package integration

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/testserver"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	AuditID string `json:"auditID"`
	User    struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Namespace, Name, Subresource string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject struct {
		Epoch int64 `json:"epoch"`
	} `json:"requestObject"`
	// ResponseObject is the ReservedHost of a success, a Status of a failure.
	ResponseObject json.RawMessage `json:"responseObject"`
}

// answeredEpoch is the epoch of the ReservedHost in the answer, 0 for errors.
func (e auditEvent) answeredEpoch() int64 {
	var host struct {
		Kind   string `json:"kind"`
		Status struct {
			Reservation struct {
				Epoch int64 `json:"epoch"`
			} `json:"reservation"`
		} `json:"status"`
	}
	if json.Unmarshal(e.ResponseObject, &host) != nil || host.Kind != "ReservedHost" {
		return 0
	}
	return host.Status.Reservation.Epoch
}

// TestAuditRecordsReleases: every release attempt appears in the audit log
// with the user, the host, the epoch, the request id and the outcome.
func TestAuditRecordsReleases(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "h-audit", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	refused := f.release(t, f.admin, "h-audit", `{"agreed":true,"epoch":5}`, "")
	done := f.release(t, f.admin, "h-audit", agreed, "")
	if refused.code != 409 || done.code != 200 {
		t.Fatalf("releases: %d %d", refused.code, done.code)
	}
	want := map[string]auditEvent{}
	deadline := time.Now().Add(30 * time.Second)
	for len(want) < 2 && time.Now().Before(deadline) {
		want = releaseEvents(t, filepath.Join(s.DataDir, "audit.log"))
		time.Sleep(100 * time.Millisecond)
	}
	for _, tc := range []struct {
		r                        response
		code                     int
		sentEpoch, answeredEpoch int64
	}{{refused, 409, 5, 0}, {done, 200, 1, 2}} {
		id := tc.r.header.Get("X-Request-Id")
		e, ok := want[id]
		if !ok {
			t.Errorf("no audit event for request %s", id)
			continue
		}
		if e.User.Username != "alice" || e.ObjectRef.Namespace != "acme" || e.ObjectRef.Name != "h-audit" ||
			e.ResponseStatus.Code != tc.code || e.RequestObject.Epoch != tc.sentEpoch || e.answeredEpoch() != tc.answeredEpoch {
			t.Errorf("audit event for %s: %+v", id, e)
		}
	}
}

func releaseEvents(t *testing.T, path string) map[string]auditEvent {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer file.Close()
	events := map[string]auditEvent{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.ObjectRef.Subresource == "release-capacity" {
			events[e.AuditID] = e
		}
	}
	return events
}
