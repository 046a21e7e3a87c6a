package integration

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/envelope"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// leanBeats reads how many heartbeats the lean path answered with code.
func leanBeats(t *testing.T, s *testserver.Server, code int) int {
	t.Helper()
	return metricValue(t, s, `nodus_heartbeat_lean_requests_total{code="`+strconv.Itoa(code)+`"} `)
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
	heartbeat := enrollAgent(t, s, "heartbeat", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
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
		// nodes/heartbeat is a create of a Node, not a beat of node "heartbeat".
		{name: "a node named heartbeat", path: "/apis/nodus.dev/v1/nodes/heartbeat", body: `{"agentGeneration":1}`, client: "heartbeat", code: 403, reason: "Forbidden"},
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
			case "heartbeat":
				client = heartbeat
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

// TestABeatWhoseBodyNeverComesTimesOut: an agent (or a party holding its
// credential) sends a beat's headers and part of its body, then nothing.
// The generic chain answers 504 Timeout at the request timeout; the lean
// path read the body without a deadline, holding a slot and the server's
// shutdown (which waits for such requests) for as long as the connection
// stayed open. Both must answer alike, within the timeout.
func TestABeatWhoseBodyNeverComesTimesOut(t *testing.T) {
	testserver.KeepLogs(t)
	s, err := testserver.Start(t.TempDir(), nil, func(o *server.Options) { o.RequestTimeout = 2 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	newFleet(t, s)
	own := enrollAgent(t, s, "lean-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
	transport, err := rest.TransportFor(own)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: transport, Timeout: 20 * time.Second}
	const path = "/apis/nodus.dev/v1/nodes/lean-1/heartbeat"
	var reasons []string
	for _, c := range []struct {
		path string
		lean bool
	}{{path, true}, {path + "?pretty=false", false}} {
		before := leanBeats(t, s, http.StatusGatewayTimeout)
		body, stall := io.Pipe()
		go func() { _, _ = stall.Write([]byte(`{"agentGeneration"`)) }()
		req, err := http.NewRequest(http.MethodPost, own.Host+c.path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 100
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		took := time.Since(start)
		stall.Close()
		if err != nil {
			t.Fatalf("%s: a beat whose body stalled got no answer in %s: %v", c.path, took, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := response{code: resp.StatusCode, header: resp.Header, body: answer}
		if r.code != http.StatusGatewayTimeout || took > 10*time.Second {
			t.Fatalf("%s: %d after %s, want 504 within the 2 s timeout: %s", c.path, r.code, took, answer)
		}
		reasons = append(reasons, string(envelopeOf(t, r).Reason))
		if took := leanBeats(t, s, http.StatusGatewayTimeout) - before; took != map[bool]int{true: 1, false: 0}[c.lean] {
			t.Errorf("%s: the lean path answered %d, want lean=%v", c.path, took, c.lean)
		}
	}
	if reasons[0] != "Timeout" || reasons[1] != reasons[0] {
		t.Errorf("reasons: lean %q, generic %q, want Timeout for both", reasons[0], reasons[1])
	}
}
