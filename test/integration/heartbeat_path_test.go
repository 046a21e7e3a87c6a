package integration

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/envelope"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// leanBeats reads how many heartbeats the lean path answered with code.
func leanBeats(t *testing.T, s *testserver.Server, code int) int {
	t.Helper()
	r := do(t, s.Config, "GET", "/metrics", "", nil)
	if r.code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", r.code, r.body)
	}
	want := `nodus_heartbeat_lean_requests_total{code="` + strconv.Itoa(code) + `"} `
	for sc := bufio.NewScanner(bytes.NewReader(r.body)); sc.Scan(); {
		if line := sc.Text(); strings.HasPrefix(line, want) {
			n, err := strconv.Atoi(strings.TrimPrefix(line, want))
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// TestLeanHeartbeatAnswersAsTheGenericChain sends each heartbeat twice:
// plain, which the lean path may take, and with a query (?pretty=false,
// which changes nothing of the answer) that sends it down the generic
// chain. Both answers must be the same, and the lean path must have taken
// exactly the plain beats it can answer, leaving every refusal of the
// authenticator, the authorizer and the strict decoder to the generic chain.
func TestLeanHeartbeatAnswersAsTheGenericChain(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "other")
	own := enrollAgent(t, s, "lean-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
	const path = "/apis/nodus.dev/v1/nodes/lean-1/heartbeat"

	for _, c := range []struct {
		name, path, body string
		client           string
		code             int
		reason           string
		lean             bool // the lean path answers the plain beat
	}{
		{name: "a beat of the current generation", path: path, body: `{"agentGeneration":1}`, client: "agent", code: 200, lean: true},
		{name: "with its type", path: path, body: `{"apiVersion":"nodus.dev/v1","kind":"NodeHeartbeat","agentGeneration":1}`, client: "agent", code: 200, lean: true},
		{name: "an operator's beat", path: path, body: `{"agentGeneration":1}`, client: "admin", code: 200, lean: true},
		{name: "a stale generation", path: path, body: `{"agentGeneration":0}`, client: "agent", code: 409, reason: "StaleAgent", lean: true},
		{name: "another node's heartbeat", path: "/apis/nodus.dev/v1/nodes/other/heartbeat", body: `{"agentGeneration":1}`, client: "agent", code: 403, reason: "Forbidden"},
		{name: "without credentials", path: path, body: `{"agentGeneration":1}`, client: "anonymous", code: 401, reason: "Unauthorized"},
		{name: "another kind", path: path, body: `{"apiVersion":"nodus.dev/v1","kind":"Node","agentGeneration":1}`, client: "agent", code: 400, reason: "BadRequest"},
		{name: "not JSON", path: path, body: `{"agentGeneration":`, client: "agent", code: 400, reason: "BadRequest"},
		{name: "an unknown field", path: path, body: `{"agentGeneration":1,"bogus":true}`, client: "agent", code: 200},
		{name: "an invalid cleaning report", path: path, body: `{"agentGeneration":1,"cleaning":{"request":1,"steps":[` +
			strings.TrimSuffix(strings.Repeat(`"wipe",`, validation.MaxCleaningSteps+1), ",") + `]}}`, client: "agent", code: 422, reason: "Invalid", lean: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := s.Config
			switch c.client {
			case "agent":
				client = own
			case "anonymous":
				client = anonymous(s)
			}
			before := leanBeats(t, s, c.code)
			plain := do(t, client, "POST", c.path, "application/json", strings.NewReader(c.body))
			afterPlain := leanBeats(t, s, c.code)
			generic := do(t, client, "POST", c.path+"?pretty=false", "application/json", strings.NewReader(c.body))
			afterGeneric := leanBeats(t, s, c.code)

			if plain.code != c.code || generic.code != c.code {
				t.Fatalf("codes: plain %d, generic %d, want %d\nplain: %s\ngeneric: %s", plain.code, generic.code, c.code, plain.body, generic.body)
			}
			if took := afterPlain - before; took != map[bool]int{true: 1, false: 0}[c.lean] {
				t.Errorf("the lean path answered %d plain beats, want lean=%v", took, c.lean)
			}
			if afterGeneric != afterPlain {
				t.Errorf("the lean path answered a beat with a query")
			}
			for _, h := range []string{"Content-Type", "Cache-Control", "X-Content-Type-Options"} {
				if plain.header.Get(h) != generic.header.Get(h) {
					t.Errorf("%s: plain %q, generic %q", h, plain.header.Get(h), generic.header.Get(h))
				}
			}
			for _, r := range []response{plain, generic} {
				if id := r.header.Get(envelope.HeaderRequestID); id == "" || r.header.Get("Audit-Id") != id {
					t.Errorf("request id %q, audit id %q", id, r.header.Get("Audit-Id"))
				}
			}
			if c.code == 200 {
				if !bytes.Equal(plain.body, generic.body) {
					t.Errorf("answers differ:\nplain:   %s\ngeneric: %s", plain.body, generic.body)
				}
				if !strings.Contains(string(plain.body), `"kind":"NodeHeartbeat"`) || !strings.Contains(string(plain.body), `"intervalSeconds":`) {
					t.Errorf("answer: %s", plain.body)
				}
				return
			}
			p, g := envelopeOf(t, plain), envelopeOf(t, generic)
			if string(p.Reason) != c.reason || p.Reason != g.Reason || p.Message != g.Message || p.Fix != g.Fix {
				t.Errorf("refusals differ (want reason %s):\nplain:   %s\ngeneric: %s", c.reason, plain.body, generic.body)
			}
		})
	}
}
