package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestBadInputGetsA4xxEnvelope sends malformed, mistyped, oversized and
// unauthenticated requests: each must get a 4xx Status envelope with a
// registered reason, never a 500, and must write nothing.
func TestBadInputGetsA4xxEnvelope(t *testing.T) {
	s := testserver.StartTestServer(t)
	if _, err := s.Client.NodusV1().Projects().Create(ctx(t), project("acme"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expired, err := s.Client.NodusV1().AccessTokens().Create(ctx(t), &nodusv1.AccessToken{
		ObjectMeta: metav1.ObjectMeta{Name: "expired"},
		Spec:       nodusv1.AccessTokenSpec{User: "alice", ExpiresAt: &metav1.Time{Time: time.Now().Add(-time.Minute)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := strings.Replace(expired.Status.Token, "expired.", "expired.x", 1)
	const nodus = "/apis/nodus.dev/v1"
	pool := func(body string) string {
		return `{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"p"},"spec":` + body + `}`
	}
	host := `{"apiVersion":"nodus.dev/v1","kind":"ReservedHost","metadata":{"name":"h"},"status":{"inventory":{"cpu":1,"memoryMiB":1,"diskGiB":1},` +
		`"reservation":{"project":"acme","startsAt":"2026-01-01T00:00:00Z","endsAt":"2026-02-01T00:00:00Z","loginUser":"ubuntu","epoch":%EPOCH%,"state":"active"}}}`

	alice := tokenFor(t, s, "alice")
	cases := []struct {
		name, method, path, ctype, body string
		cfg                             *rest.Config
		want                            int
	}{
		{"truncated JSON", "POST", nodus + "/pools", "application/json", `{"apiVersion":"nodus.dev/v1","kind":"Pool",`, nil, 400},
		{"not an object", "POST", nodus + "/pools", "application/json", `[1,2,3]`, nil, 400},
		{"null body", "POST", nodus + "/pools", "application/json", `null`, nil, 422},
		{"empty body", "POST", nodus + "/pools", "application/json", ``, nil, 400},
		{"YAML garbage", "POST", nodus + "/pools", "application/yaml", "::: [", nil, 400},
		{"wrong kind for the resource", "POST", nodus + "/nodes", "application/json", pool(`{}`), nil, 400},
		{"unknown group version", "POST", nodus + "/pools", "application/json", `{"apiVersion":"nodus.dev/v9","kind":"Pool","metadata":{"name":"p"}}`, nil, 400},
		{"wrong field type", "POST", nodus + "/pools", "application/json", pool(`{"supplier":42}`), nil, 400},
		{"unknown field (strict)", "POST", nodus + "/pools?fieldValidation=Strict", "application/json", pool(`{"bogus":1}`), nil, 400},
		{"duplicate field (strict)", "POST", nodus + "/pools?fieldValidation=Strict", "application/json", `{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"p","name":"q"}}`, nil, 400},
		{"bad fieldValidation", "POST", nodus + "/pools?fieldValidation=Loose", "application/json", pool(`{}`), nil, 422},
		{"bad dryRun", "POST", nodus + "/pools?dryRun=Maybe", "application/json", pool(`{}`), nil, 422},
		{"integer overflow", "POST", nodus + "/namespaces/acme/reservedhosts", "application/json", strings.Replace(host, "%EPOCH%", "1e400", 1), nil, 400},
		{"negative epoch", "POST", nodus + "/namespaces/acme/reservedhosts", "application/json", strings.Replace(host, "%EPOCH%", "-1", 1), nil, 422},
		// Written by the scheduler, read back by owners and by it: nothing out of its domain.
		{"a lending with negative GPUs and a borrower twice", "POST", nodus + "/namespaces/acme/hostlendings", "application/json",
			`{"apiVersion":"nodus.dev/v1","kind":"HostLending","metadata":{"name":"h"},"status":{"state":"lent","epoch":1,"maxGPUs":-8,"maxExecutions":1,` +
				`"borrowedGPUs":0,"executions":0,"borrowers":[{"project":"b","gpus":0,"executions":0},{"project":"b","gpus":0,"executions":0}],"changedAt":"2026-01-01T00:00:00Z"}}`, nil, 422},
		{"huge body", "POST", nodus + "/pools", "application/json", pool(`{"supplier":"` + strings.Repeat("x", 5<<20) + `"}`), nil, 413},
		{"over-long free text", "POST", nodus + "/pools", "application/json", pool(`{"supplier":"` + strings.Repeat("x", 2000) + `"}`), nil, 422},
		{"invalid name", "POST", nodus + "/pools", "application/json", `{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"UPPER case"}}`, nil, 422},
		{"invalid trait", "POST", nodus + "/nodes", "application/json", `{"apiVersion":"nodus.dev/v1","kind":"Node","metadata":{"name":"n"},"spec":{"pool":"p","resourceClass":"c","traits":["lower"]}}`, nil, 422},
		{"term ends before it starts", "POST", nodus + "/reservations", "application/json", `{"apiVersion":"nodus.dev/v1","kind":"Reservation","metadata":{"name":"r"},"spec":{"project":"acme","placement":{"node":"n"},"startsAt":"2027-01-01T00:00:00Z","endsAt":"2026-01-01T00:00:00Z"}}`, nil, 422},
		{"root login user", "POST", nodus + "/reservations", "application/json", `{"apiVersion":"nodus.dev/v1","kind":"Reservation","metadata":{"name":"r"},"spec":{"project":"acme","placement":{"node":"n"},"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z","loginUser":"root"}}`, nil, 422},
		{"unknown namespace", "POST", nodus + "/namespaces/ghost/reservedhosts", "application/json", strings.NewReplacer("%EPOCH%", "1", `"project":"acme"`, `"project":"ghost"`).Replace(host), nil, 404},
		{"malformed token", "GET", nodus + "/pools", "", "", bearer(s, "no-dot-here"), 401},
		{"unknown token", "GET", nodus + "/pools", "", "", bearer(s, "ghost.c2VjcmV0"), 401},
		{"no credentials", "GET", nodus + "/pools", "", "", anonymous(s), 401},
		{"expired token", "GET", nodus + "/pools", "", "", bearer(s, expired.Status.Token), 401},
		{"wrong secret for a real token", "GET", nodus + "/pools", "", "", bearer(s, forged), 401},
		{"bad label selector", "GET", nodus + "/pools?labelSelector=a%20b%20c", "", "", nil, 400},
		{"bad limit", "GET", nodus + "/pools?limit=abc", "", "", nil, 400},
		{"unknown path", "GET", "/apis/nodus.dev/v2/pools", "", "", nil, 404},
		// The watch cache answered these with a bare storage error: 500.
		{"bad resourceVersion on a get", "GET", nodus + "/projects/acme?resourceVersion=abc", "", "", nil, 400},
		{"bad resourceVersion on a watch", "GET", nodus + "/pools?watch=1&resourceVersion=abc", "", "", nil, 400},
		{"negative resourceVersion on a watch", "GET", nodus + "/pools?watch=1&resourceVersion=-1", "", "", nil, 400},
		{"bad resourceVersion on a list", "GET", nodus + "/pools?resourceVersion=1x", "", "", nil, 400},
		{"bad resourceVersion on a namespace", "GET", "/api/v1/namespaces/acme?resourceVersion=abc", "", "", nil, 400},
		{"bad resourceVersion on a namespace watch", "GET", "/api/v1/namespaces?watch=1&resourceVersion=abc", "", "", nil, 400},
		{"bad resourceVersion in a create", "POST", nodus + "/pools", "application/json", `{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"p","resourceVersion":"abc"}}`, nil, 400},
		{"resourceVersion in a create", "POST", nodus + "/pools", "application/json", `{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"p","resourceVersion":"7"}}`, nil, 400},
		{"bad resourceVersion in a patch", "PATCH", nodus + "/projects/acme", "application/merge-patch+json", `{"metadata":{"resourceVersion":"abc"}}`, nil, 400},
		{"bad resourceVersion in a delete's preconditions", "DELETE", nodus + "/projects/acme", "application/json", `{"preconditions":{"resourceVersion":"abc"}}`, nil, 409},
		// Server-side apply's typed patch is built before validation, and
		// its errors were plain: 500.
		{"apply: a duplicate map key in a list", "PATCH", nodus + "/pools/p?fieldManager=t", "application/apply-patch+yaml",
			`{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"p"},"spec":{"lending":{"open":true,"borrowers":[{"project":"a","maxGPUs":1},{"project":"a","maxGPUs":2}]}}}`, nil, 422},
		{"apply: a wrong field type", "PATCH", nodus + "/pools/p?fieldManager=t", "application/apply-patch+yaml",
			`{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"p"},"spec":{"supplier":42}}`, nil, 422},
		{"apply: an unknown field", "PATCH", nodus + "/pools/p?fieldManager=t", "application/apply-patch+yaml",
			`{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"p"},"spec":{"bogus":1}}`, nil, 422},
		{"apply: a namespace (read only)", "PATCH", "/api/v1/namespaces/acme?fieldManager=t", "application/apply-patch+yaml",
			`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"acme"}}`, nil, 405},
		{"apply: a kind the group does not have", "PATCH", nodus + "/pools/p?fieldManager=t", "application/apply-patch+yaml",
			`{"apiVersion":"nodus.dev/v1","kind":"Widget","metadata":{"name":"p"}}`, nil, 400},
		{"apply: duplicate traits", "PATCH", nodus + "/nodes/n?fieldManager=t", "application/apply-patch+yaml",
			`{"apiVersion":"nodus.dev/v1","kind":"Node","metadata":{"name":"n"},"spec":{"pool":"p","resourceClass":"c","traits":["CUSTOM_A","CUSTOM_A"]}}`, nil, 422},
		{"bad resourceVersion in an update", "PUT", nodus + "/projects/acme", "application/json", `{"apiVersion":"nodus.dev/v1","kind":"Project","metadata":{"name":"acme","resourceVersion":"abc"}}`, nil, 400},
		// A customer's namespace that can be no project's name is refused
		// as one the caller is not in (the store's key check answered 500).
		{"a customer's namespace that is no name", "GET", nodus + "/namespaces/%25/reservedhosts", "", "", alice, 403},
		{"a customer's namespace of dots", "GET", nodus + "/namespaces/../reservedhosts", "", "", alice, 403},
		{"a customer's namespace read", "GET", "/api/v1/namespaces/%25", "", "", alice, 403},
		{"a customer's project read", "GET", nodus + "/projects/%25", "", "", alice, 403},
		{"a customer's certificate request", "POST", nodus + "/namespaces/%25/reservedhosts/h/ssh-certificate", "application/json", `{"publicKey":"x"}`, alice, 403},
		// An operator's: the store's key check answered these 500.
		{"an operator's list in a namespace of dots", "GET", nodus + "/namespaces/%2E%2E/reservedhosts", "", "", nil, 400},
		{"an operator's watch in a namespace of a dot", "GET", nodus + "/namespaces/%2E/executions?watch=1", "", "", nil, 400},
		{"an operator's read in a namespace of dots", "GET", nodus + "/namespaces/%2E%2E/reservedhosts/h", "", "", nil, 400},
		{"an operator's action in a namespace of dots", "POST", nodus + "/namespaces/%2E%2E/reservedhosts/h/lend", "application/json", `{}`, nil, 400},
		{"an operator's read in a namespace that is no name", "GET", nodus + "/namespaces/%25/reservedhosts/h", "", "", nil, 400},
		{"an operator's read of a namespace that is no name", "GET", "/api/v1/namespaces/%25", "", "", nil, 400},
		// A name no project can have names no namespace: 404, as
		// kube-apiserver answers (it was 400).
		{"an operator's read of a namespace no project can be", "GET", "/api/v1/namespaces/Bad_Name", "", "", nil, 404},
		{"a customer's read of a namespace no project can be", "GET", "/api/v1/namespaces/Bad_Name", "", "", alice, 403},
		{"an operator's list in a namespace no project can be", "GET", nodus + "/namespaces/Bad_Name/reservedhosts", "", "", nil, 400},
		// A strategic merge patch's errors the library does not map were
		// plain: 500.
		{"strategic merge patch: an unknown directive", "PATCH", nodus + "/projects/acme", "application/strategic-merge-patch+json", `{"$patch":"bogus"}`, nil, 400},
		{"strategic merge patch: an order of a field there is not", "PATCH", nodus + "/projects/acme", "application/strategic-merge-patch+json", `{"$setElementOrder/bogus":[]}`, nil, 400},
		{"strategic merge patch: a field of the wrong type", "PATCH", nodus + "/projects/acme", "application/strategic-merge-patch+json", `{"metadata":{"labels":"x"}}`, nil, 422},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg == nil {
				cfg = s.Config
			}
			r := do(t, cfg, tc.method, tc.path, tc.ctype, strings.NewReader(tc.body))
			if r.code != tc.want {
				t.Fatalf("got %d, want %d: %.300s", r.code, tc.want, r.body)
			}
			if env := envelopeOf(t, r); !apierror.IsRegistered(env.Reason) {
				t.Errorf("reason %q is not registered", env.Reason)
			}
		})
	}

	pools, err := s.Client.NodusV1().Pools().List(ctx(t), metav1.ListOptions{})
	if err != nil || len(pools.Items) != 0 {
		t.Errorf("bad input must write nothing; pools: %v %d", err, len(pools.Items))
	}
	// A strategic merge patch's list item without its merge key: a 400
	// that does not repeat the patch (the library prints it as a map).
	owned := project("owned")
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: "s", UID: "0b5b1c7e-5f4e-4a8e-9d7e-3c1f2a6b7d8e"}}
	if _, err := s.Client.NodusV1().Projects().Create(ctx(t), owned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := do(t, s.Config, "PATCH", nodus+"/projects/owned", "application/strategic-merge-patch+json", strings.NewReader(
		`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Secret","name":"the-value-not-to-repeat"}]}}`)); r.code != http.StatusBadRequest ||
		envelopeOf(t, r).Reason != metav1.StatusReasonBadRequest || strings.Contains(string(r.body), "the-value-not-to-repeat") {
		t.Errorf("a strategic merge patch's list item without its merge key: %d %s", r.code, r.body)
	}
	// An Execution's refusal names where, not what: its environment holds
	// a borrower's secrets, and the answer's message goes to the audit log.
	if r := do(t, s.Config, "PATCH", nodus+"/namespaces/acme/executions/e?fieldManager=t", "application/apply-patch+yaml", strings.NewReader(
		`{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"name":"e"},"spec":{"pool":"p","command":["x"],"env":[{"name":"PIN","value":7.125}]}}`)); r.code != http.StatusUnprocessableEntity ||
		strings.Contains(string(r.body), "7.125") || !strings.Contains(string(r.body), "PIN") {
		t.Errorf("an apply of an execution whose environment value is a number: %d %.400s", r.code, r.body)
	}
	// The apply check reads the body and gives it back whole: a patch that
	// fits is applied.
	if r := do(t, s.Config, "PATCH", nodus+"/pools/fits?fieldManager=t", "application/apply-patch+yaml", strings.NewReader(
		`{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"fits"},"spec":{"supplier":"`+strings.Repeat("x", 1000)+`"}}`)); r.code != http.StatusCreated {
		t.Errorf("an apply patch that fits: %d %.300s", r.code, r.body)
	}
	// An apply that creates may carry the version of a manifest read
	// earlier: also of the kinds whose creates an apply routes through
	// their own Create (a project's sweep, an allocation's name claims).
	for _, kind := range []struct{ resource, manifest string }{
		{"pools", `{"apiVersion":"nodus.dev/v1","kind":"Pool","metadata":{"name":"from-a-manifest","resourceVersion":"7"}}`},
		{"projects", `{"apiVersion":"nodus.dev/v1","kind":"Project","metadata":{"name":"from-a-manifest","resourceVersion":"7","generation":3}}`},
		{"allocations", `{"apiVersion":"nodus.dev/v1","kind":"Allocation","metadata":{"name":"from-a-manifest","resourceVersion":"7"},"spec":{"resourceClass":"gpu-h100x8"}}`},
	} {
		if r := do(t, s.Config, "PATCH", nodus+"/"+kind.resource+"/from-a-manifest?fieldManager=t", "application/apply-patch+yaml", strings.NewReader(kind.manifest)); r.code != http.StatusCreated {
			t.Errorf("an apply that creates %s, with a resourceVersion: %d %.300s", kind.resource, r.code, r.body)
		}
	}
	if r := do(t, s.Config, "GET", "/healthz", "", nil); r.code != http.StatusOK || r.header.Get("X-Request-Id") == "" {
		t.Errorf("server unhealthy after bad input, or a success without X-Request-Id: %d %v", r.code, r.header)
	}
}
