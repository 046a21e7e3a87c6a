package integration

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestATimeTheStoreCannotReadBackIsRefused: a time sent with a far offset
// ("9999-12-31T23:00:00-02:00") is the year 10000 in UTC, which the JSON
// the store writes cannot carry back. The store wrote it, answered 500,
// and from then on every read and list of the kind failed
// (StorageReadError): a tenant's managedFields time stopped the
// executions' list for every project and the scheduler's informer. Such a
// time is refused 422 wherever it is, and nothing is written.
func TestATimeTheStoreCannotReadBackIsRefused(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"lab": 8}, false)
	tenant := f.borrowers["lab"]
	const nodus = "/apis/nodus.dev/v1"
	const far = `"9999-12-31T23:00:00-02:00"`
	managedFields := `"managedFields":[{"manager":"x","operation":"Update","apiVersion":"nodus.dev/v1","time":` + far +
		`,"fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:image":{}}}}]`
	execution := func(name, metadata string) string {
		return `{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"name":"` + name + `"` + metadata +
			`},"spec":{"pool":"gpu","command":["train"],"gpus":1,"maxRuntimeSeconds":60}}`
	}
	if r := do(t, tenant, "POST", nodus+"/namespaces/lab/executions", "application/json", strings.NewReader(execution("near", ""))); r.code != http.StatusCreated {
		t.Fatalf("an execution: %d %s", r.code, r.body)
	}
	cases := []struct {
		name, method, path, contentType, body string
		cfg                                   *rest.Config
		read                                  string
	}{
		{"an operator's reservation ending in the year 10000", "POST", nodus + "/reservations", "application/json",
			`{"apiVersion":"nodus.dev/v1","kind":"Reservation","metadata":{"name":"far"},"spec":{"project":"acme","placement":{"node":"n"},"startsAt":"2026-01-01T00:00:00Z","endsAt":` + far + `}}`,
			s.Config, nodus + "/reservations"},
		{"an operator's access token expiring in the year 10000", "POST", nodus + "/accesstokens", "application/json",
			`{"apiVersion":"nodus.dev/v1","kind":"AccessToken","metadata":{"name":"far"},"spec":{"user":"alice","expiresAt":` + far + `}}`,
			s.Config, nodus + "/accesstokens"},
		{"a tenant's execution whose managedFields time is in the year 10000", "POST", nodus + "/namespaces/lab/executions", "application/json",
			execution("far", ","+managedFields), tenant, nodus + "/executions"},
		{"an operator's patch of an execution's managedFields time", "PATCH", nodus + "/namespaces/lab/executions/near", "application/merge-patch+json",
			`{"metadata":{` + managedFields + `}}`, s.Config, nodus + "/namespaces/lab/executions/near"},
		{"an operator's patch of a project's managedFields time", "PATCH", nodus + "/projects/acme", "application/merge-patch+json",
			`{"metadata":{` + managedFields + `}}`, s.Config, nodus + "/projects"},
		{"an operator's status write of a node's heartbeat time", "PATCH", nodus + "/nodes/gpu-00/status", "application/merge-patch+json",
			`{"status":{"lastHeartbeatTime":` + far + `}}`, s.Config, nodus + "/nodes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.cfg, tc.method, tc.path, tc.contentType, strings.NewReader(tc.body))
			if env := envelopeOf(t, r); r.code != http.StatusUnprocessableEntity || env.Reason != "Invalid" {
				t.Errorf("got %d %s, want 422 Invalid: %.400s", r.code, env.Reason, r.body)
			}
			// Nothing unreadable was written: the kind still reads, for
			// the operator's informers as for everyone.
			if read := do(t, s.Config, "GET", tc.read, "", nil); read.code != http.StatusOK {
				t.Errorf("GET %s after it: %d %.300s", tc.read, read.code, read.body)
			}
		})
	}
}
