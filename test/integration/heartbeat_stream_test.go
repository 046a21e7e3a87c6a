package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/agent"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/envelope"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/heartbeatstream"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// rawStream is a heartbeat stream read and written line by line, as the
// wire carries it.
type rawStream struct {
	proto  int // the HTTP version's major number
	in     *io.PipeWriter
	out    *bufio.Reader
	cancel context.CancelFunc
}

// openStream opens node's heartbeat stream with cfg's credential. A
// refused opening returns its answer, and no stream.
func openStream(t *testing.T, cfg *rest.Config, node string) (*rawStream, *response) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(ctx(t))
	r, w := io.Pipe()
	req, err := http.NewRequestWithContext(c, http.MethodPost, cfg.Host+"/apis/nodus.dev/v1/nodes/"+node+"/"+heartbeatstream.Subresource, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("opening the heartbeat stream of %s: %v", node, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return nil, &response{code: resp.StatusCode, header: resp.Header, body: body}
	}
	s := &rawStream{proto: resp.ProtoMajor, in: w, out: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s, nil
}

func (s *rawStream) close() { s.cancel(); _ = s.in.Close() }

// beat sends body as one line and returns the answer's line: its code is
// 200 for a NodeHeartbeat, the Status's otherwise.
func (s *rawStream) beat(t *testing.T, body string) response {
	t.Helper()
	if _, err := io.WriteString(s.in, body+"\n"); err != nil {
		t.Fatalf("writing a beat: %v", err)
	}
	return s.answer(t)
}

func (s *rawStream) answer(t *testing.T) response {
	t.Helper()
	line, err := s.readLine()
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	var kind metav1.TypeMeta
	if err := json.Unmarshal(line, &kind); err != nil {
		t.Fatalf("the answer is not JSON: %v: %s", err, line)
	}
	r := response{code: http.StatusOK, body: line, header: http.Header{}}
	if kind.Kind == "Status" {
		var st envelope.Status
		if err := json.Unmarshal(line, &st); err != nil {
			t.Fatal(err)
		}
		r.code = int(st.Code)
		r.header.Set(envelope.HeaderRequestID, st.RequestID)
	}
	return r
}

// readLine reads the next answer line, giving up after 20 s.
func (s *rawStream) readLine() ([]byte, error) {
	type read struct {
		line []byte
		err  error
	}
	done := make(chan read, 1)
	go func() {
		line, err := s.out.ReadBytes('\n')
		done <- read{line, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && len(r.line) == 0 {
			return nil, r.err
		}
		return r.line[:len(r.line)-1], nil
	case <-time.After(20 * time.Second):
		return nil, errors.New("no answer in 20 s")
	}
}

// ends says whether the server ended the stream: the answers end.
func (s *rawStream) ends(t *testing.T) {
	t.Helper()
	if line, err := s.readLine(); err == nil || err.Error() == "no answer in 20 s" {
		t.Fatalf("the stream did not end: %q %v", line, err)
	}
}

// streamSpec is the enrollment of the tests' streaming node, stream-1.
var streamSpec = nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}

// streamingAgent enrolls node stream-1's agent on s (with newFleet's pool),
// opens its heartbeat stream and sends a first beat on it.
func streamingAgent(t *testing.T, s *testserver.Server) (*rest.Config, *rawStream) {
	t.Helper()
	newFleet(t, s)
	own := enrollAgent(t, s, "stream-1", streamSpec, t.TempDir())
	stream, refused := openStream(t, own, "stream-1")
	if refused != nil {
		t.Fatalf("the stream was refused: %d %s", refused.code, refused.body)
	}
	if r := stream.beat(t, `{"agentGeneration":1}`); r.code != 200 {
		t.Fatalf("first beat: %d %s", r.code, r.body)
	}
	return own, stream
}

// beatingEverySecond starts a server whose agents beat every second, with
// change applied to its options too.
func beatingEverySecond(t *testing.T, change func(*server.Options)) *testserver.Server {
	t.Helper()
	s, err := testserver.Start(t.TempDir(), nil, func(o *server.Options) {
		o.HeartbeatInterval = time.Second
		if change != nil {
			change(o)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestAHeartbeatStreamAnswersAsPlainBeats sends each beat of the lean
// path's equivalence test as a POST and on one stream: each answer on the
// stream must be the POST's (the same object, or the same refusal: reason,
// message, fix and docs), and refusals must not end the stream.
func TestAHeartbeatStreamAnswersAsPlainBeats(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	own := enrollAgent(t, s, "stream-1", streamSpec, t.TempDir())
	_ = f
	const path = "/apis/nodus.dev/v1/nodes/stream-1/heartbeat"
	streams := map[string]*rawStream{}
	parent := t // the streams outlive each case
	for _, c := range []struct {
		name, body, client string
		code               int
		reason             string
		sameMessage        bool // the generic decoder words its refusal otherwise
	}{
		{name: "a beat of the current generation", body: `{"agentGeneration":1}`, client: "agent", code: 200},
		{name: "a stale generation", body: `{"agentGeneration":0}`, client: "agent", code: 409, reason: "StaleAgent", sameMessage: true},
		{name: "with its type", body: `{"apiVersion":"nodus.dev/v1","kind":"NodeHeartbeat","agentGeneration":1}`, client: "agent", code: 200},
		{name: "another kind", body: `{"apiVersion":"nodus.dev/v1","kind":"Node","agentGeneration":1}`, client: "agent", code: 400, reason: "BadRequest"},
		{name: "not JSON", body: `{"agentGeneration":`, client: "agent", code: 400, reason: "BadRequest"},
		{name: "an unknown field", body: `{"agentGeneration":1,"bogus":true}`, client: "agent", code: 200},
		{name: "an invalid cleaning report", body: `{"agentGeneration":1,"cleaning":{"request":1,"steps":[` +
			strings.TrimSuffix(strings.Repeat(`"wipe",`, validation.MaxCleaningSteps+1), ",") + `]}}`, client: "agent", code: 422, reason: "Invalid", sameMessage: true},
		{name: "an operator's beat", body: `{"agentGeneration":1}`, client: "admin", code: 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := s.Config
			if c.client == "agent" {
				cfg = own
			}
			stream := streams[c.client]
			if stream == nil {
				var refused *response
				if stream, refused = openStream(parent, cfg, "stream-1"); refused != nil {
					t.Fatalf("the stream was refused: %d %s", refused.code, refused.body)
				}
				streams[c.client] = stream
			}
			plain := do(t, cfg, "POST", path, "application/json", strings.NewReader(c.body))
			onStream := stream.beat(t, c.body)
			if plain.code != c.code || onStream.code != c.code {
				t.Fatalf("codes: POST %d, stream %d, want %d\nPOST:   %s\nstream: %s", plain.code, onStream.code, c.code, plain.body, onStream.body)
			}
			if c.code == 200 {
				if strings.TrimSpace(string(plain.body)) != string(onStream.body) {
					t.Errorf("answers differ:\nPOST:   %s\nstream: %s", plain.body, onStream.body)
				}
				return
			}
			p, o := envelopeOf(t, plain), envelopeOf(t, onStream)
			if string(o.Reason) != c.reason || p.Reason != o.Reason || p.Fix != o.Fix || p.Docs != o.Docs || (c.sameMessage && p.Message != o.Message) {
				t.Errorf("refusals differ (want reason %s):\nPOST:   %s\nstream: %s", c.reason, plain.body, onStream.body)
			}
		})
	}
}

// TestAHeartbeatStreamIsOpenedOnlyAsItsBeatsAreAllowed: the node
// restriction holds for the stream's opening as for a beat: an agent opens
// its own node's stream only, and a caller without a credential none.
func TestAHeartbeatStreamIsOpenedOnlyAsItsBeatsAreAllowed(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "other")
	own := enrollAgent(t, s, "stream-1", streamSpec, t.TempDir())
	for _, c := range []struct {
		name, node string
		cfg        *rest.Config
		code       int
		reason     string
	}{
		{name: "another node's stream", node: "other", cfg: own, code: 403, reason: "Forbidden"},
		{name: "without credentials", node: "stream-1", cfg: anonymous(s), code: 401, reason: "Unauthorized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream, refused := openStream(t, c.cfg, c.node)
			if stream != nil {
				t.Fatalf("the stream was opened")
			}
			if refused.code != c.code || string(envelopeOf(t, *refused).Reason) != c.reason {
				t.Errorf("refusal: %d %s, want %d %s", refused.code, refused.body, c.code, c.reason)
			}
		})
	}
}

// TestAHeartbeatStreamEndsWhenItsAgentIsReEnrolled: a stream opened by the
// node's agent outlives the agent's credential no more than a beat does:
// once the node is enrolled anew, the old agent's next beat on its open
// stream is refused as a POST of it is, and the stream ends.
func TestAHeartbeatStreamEndsWhenItsAgentIsReEnrolled(t *testing.T) {
	s := testserver.StartTestServer(t)
	old, stream := streamingAgent(t, s)
	spec := streamSpec
	spec.NodeName = "stream-1"
	enrollAgent(t, s, "stream-1", spec, t.TempDir())
	plain := do(t, old, "POST", "/apis/nodus.dev/v1/nodes/stream-1/heartbeat", "application/json", strings.NewReader(`{"agentGeneration":1}`))
	onStream := stream.beat(t, `{"agentGeneration":1}`)
	if plain.code != 403 || onStream.code != 403 {
		t.Fatalf("the retired agent's beat: POST %d %s, stream %d %s", plain.code, plain.body, onStream.code, onStream.body)
	}
	if p, o := envelopeOf(t, plain), envelopeOf(t, onStream); p.Reason != "AgentCredentialRetired" || o.Reason != p.Reason || o.Fix != p.Fix {
		t.Errorf("refusals differ:\nPOST:   %s\nstream: %s", plain.body, onStream.body)
	}
	stream.ends(t)
}

// TestAHeartbeatStreamEndsWhenItsCertificateExpires: a stream outlives its
// certificate no more than a beat does. Its beats pass until the
// certificate expires; the first after is refused 401, as a POST with that
// certificate is, and the stream ends. (nodusd renews its certificate two
// thirds into it, and the renewal closes its connections, its stream's
// too: this is an agent whose renewals failed.)
func TestAHeartbeatStreamEndsWhenItsCertificateExpires(t *testing.T) {
	s := shortCertificatesServer(t, 10*time.Second)
	dir := t.TempDir()
	own := enrollAgent(t, s, "stream-1", streamSpec, dir)
	notAfter := certIn(t, dir).NotAfter
	stream, refused := openStream(t, own, "stream-1")
	if refused != nil {
		t.Fatalf("the stream was refused: %d %s", refused.code, refused.body)
	}
	// A beat a second keeps the stream within its idle limit (13 s).
	for time.Until(notAfter) > 3*time.Second {
		if r := stream.beat(t, `{"agentGeneration":1}`); r.code != 200 {
			t.Fatalf("a beat %s before the certificate expires: %d %s", time.Until(notAfter), r.code, r.body)
		}
		time.Sleep(time.Second)
	}
	time.Sleep(time.Until(notAfter) + time.Second)
	plain := do(t, own, "POST", "/apis/nodus.dev/v1/nodes/stream-1/heartbeat", "application/json", strings.NewReader(`{"agentGeneration":1}`))
	onStream := stream.beat(t, `{"agentGeneration":1}`)
	if plain.code != 401 || onStream.code != 401 {
		t.Fatalf("a beat with an expired certificate: POST %d %s, stream %d %s", plain.code, plain.body, onStream.code, onStream.body)
	}
	if p, o := envelopeOf(t, plain), envelopeOf(t, onStream); o.Reason != p.Reason || o.Fix != p.Fix {
		t.Errorf("refusals differ:\nPOST:   %s\nstream: %s", plain.body, onStream.body)
	} else if !strings.Contains(o.Fix, "nodusd enroll") || !strings.Contains(o.Fix, "--node stream-1") {
		t.Errorf("the fix of an agent's expired certificate does not say to enroll the node again: %s", o.Fix)
	}
	stream.ends(t)
}

// TestAHeartbeatStreamIsBounded: a line over the heartbeat's body limit is
// refused as a POST of that body is, and ends the stream (the server reads
// no further into it); a node's newer stream ends its older one, so that a
// node holds one stream (and one goroutine) however often it reconnects.
func TestAHeartbeatStreamIsBounded(t *testing.T) {
	s := testserver.StartTestServer(t)
	own, first := streamingAgent(t, s)
	second, _ := openStream(t, own, "stream-1")
	first.ends(t)
	if r := second.beat(t, `{"agentGeneration":1}`); r.code != 200 {
		t.Fatalf("the newer stream's beat: %d %s", r.code, r.body)
	}
	huge := `{"agentGeneration":1,"cleaning":{"request":1,"message":"` + strings.Repeat("x", 300<<10) + `"}}`
	plain := do(t, own, "POST", "/apis/nodus.dev/v1/nodes/stream-1/heartbeat", "application/json", strings.NewReader(huge))
	onStream := second.beat(t, huge)
	if plain.code != 413 || onStream.code != 413 {
		t.Fatalf("an oversized beat: POST %d %s, stream %d %s", plain.code, plain.body, onStream.code, onStream.body)
	}
	if p, o := envelopeOf(t, plain), envelopeOf(t, onStream); o.Reason != p.Reason || o.Fix != p.Fix {
		t.Errorf("refusals differ:\nPOST:   %s\nstream: %s", plain.body, onStream.body)
	}
	second.ends(t)
}

// TestStoppingTheServerEndsItsHeartbeatStreams: shutdown waits for no
// long-running request, and a stream waits for its next beat (up to three
// intervals and more): the server ends its streams as it stops, at once, so
// that agents beat the next replica.
func TestStoppingTheServerEndsItsHeartbeatStreams(t *testing.T) {
	s := testserver.StartTestServer(t)
	_, stream := streamingAgent(t, s)
	start := time.Now()
	go s.Stop()
	stream.ends(t)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the stream ended %s after the stop", took)
	}
}

// TestAnAuditedServerRefusesHeartbeatStreamsAndItsAgentsBeatWithRequests:
// the audit log has an event per request, and a stream's beats would be
// one. A server whose audit policy records heartbeats refuses streams
// (405, with what to do), and nodusd beats with POSTs there.
func TestAnAuditedServerRefusesHeartbeatStreamsAndItsAgentsBeatWithRequests(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := testserver.Start(dir, nil, func(o *server.Options) { o.AuditPolicyFile = policy })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	newFleet(t, s)
	agentDir := t.TempDir()
	own := enrollAgent(t, s, "stream-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, agentDir)
	stream, refused := openStream(t, own, "stream-1")
	if stream != nil {
		t.Fatal("an audited server opened a heartbeat stream")
	}
	if st := envelopeOf(t, *refused); refused.code != 405 || st.Reason != "MethodNotAllowed" || !strings.Contains(st.Message, "audit") ||
		!strings.Contains(st.Fix, "/heartbeat") {
		t.Errorf("refusal: %d %s", refused.code, refused.body)
	}
	client, err := versioned.NewForConfig(own)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := heartbeatstream.Open(ctx(t), client.NodusV1().RESTClient(), "stream-1", 10*time.Second); err == nil {
		t.Error("the agent's stream opened on an audited server")
	}
	runAgent(t, agent.Options{StateDir: agentDir, DiskPath: agentDir, Grace: 100 * time.Millisecond})
	waitNode(t, s, "stream-1", func(n *nodusv1.Node) bool {
		return meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady)
	})
}

// TestNodusdBeatsOverAStream: a real agent opens its node's heartbeat
// stream and keeps its node ready over it; when it stops, the stream ends.
func TestNodusdBeatsOverAStream(t *testing.T) {
	s := beatingEverySecond(t, nil)
	newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "stream-1", streamSpec, dir)
	// The gauge is the process's, which earlier tests' servers shared.
	streams := func() int { return metricValue(t, s, "nodus_heartbeat_streams ") }
	before := streams()
	lean := leanBeats(t, s, http.StatusOK)
	a, err := agent.New(agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = a.Run(runCtx) }()
	waitNode(t, s, "stream-1", func(n *nodusv1.Node) bool {
		return meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady)
	})
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
		return streams() == before+1 && leanBeats(t, s, http.StatusOK) >= lean+3, nil
	}); err != nil {
		t.Fatalf("the agent's stream: %d open (%d before), %d beats answered (%d before)", streams(), before, leanBeats(t, s, http.StatusOK), lean)
	}
	stop()
	<-ran
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) { return streams() == before, nil }); err != nil {
		t.Errorf("the stopped agent's stream stayed open: %d (%d before)", streams(), before)
	}
}

// TestASilentHeartbeatStreamEnds: a stream holds a goroutine and a
// connection's stream on the server; one whose agent stopped beating (a
// party holding the credential, or a host that hung) ends once no beat came
// for three intervals and 10 s, when the node is not ready anyway. Lines
// with nothing in them are no beats: they neither keep it open nor are
// checked as beats are. Before the stream ends, a beat longer after the
// last than the server's request timeout is answered: the answer's write
// deadline once reset the stream between beats.
func TestASilentHeartbeatStreamEnds(t *testing.T) {
	s := beatingEverySecond(t, func(o *server.Options) { o.RequestTimeout = time.Second })
	_, stream := streamingAgent(t, s)
	time.Sleep(3 * time.Second)
	if r := stream.beat(t, `{"agentGeneration":1}`); r.code != 200 {
		t.Fatalf("a beat 3 s after the last: %d %s", r.code, r.body)
	}
	start := time.Now()
	go func() {
		for {
			if _, err := io.WriteString(stream.in, "\n"); err != nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	stream.ends(t)
	if took, limit := time.Since(start), heartbeatstream.IdleLimit(time.Second); took < limit-time.Second {
		t.Errorf("the stream ended %s after its last beat, before the idle limit %s", took, limit)
	}
}

// TestAHeartbeatStreamOverHTTP1: an agent whose connection is HTTP/1.1 (a
// proxy between it and the server) streams too: the server reads and writes
// the request at once, or refuses the stream with why.
func TestAHeartbeatStreamOverHTTP1(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	own := enrollAgent(t, s, "stream-1", streamSpec, t.TempDir())
	http1 := rest.CopyConfig(own)
	http1.TLSClientConfig.NextProtos = []string{"http/1.1"}
	stream, refused := openStream(t, http1, "stream-1")
	if refused != nil {
		t.Fatalf("the stream was refused over HTTP/1.1: %d %s", refused.code, refused.body)
	}
	if stream.proto != 1 {
		t.Fatalf("the stream went over HTTP/%d", stream.proto)
	}
	for range 3 {
		if r := stream.beat(t, `{"agentGeneration":1}`); r.code != 200 {
			t.Fatalf("a beat over HTTP/1.1: %d %s", r.code, r.body)
		}
	}
}

// TestAnAgentBehindAProxyThatCannotStreamBeatsWithRequests: behind a proxy
// that cannot stream (httputil.ReverseProxy on Go's HTTP/1.1 server, which
// reads up to 256 KiB more of a request's body before it writes the
// answer), the stream's opening was never answered, and nodusd never beat:
// its node stayed not ready. nodusd gives an opening, and a beat on a
// stream, half an interval, sends the beat as a request, and beats with
// requests from then on.
func TestAnAgentBehindAProxyThatCannotStreamBeatsWithRequests(t *testing.T) {
	s := beatingEverySecond(t, nil)
	newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "stream-1", streamSpec, dir)
	var openings, requests atomic.Int32
	proxy := agentProxy(t, s, dir, func(_ http.ResponseWriter, req *http.Request, _ http.Handler) bool {
		switch {
		case strings.HasSuffix(req.URL.Path, "/nodes/stream-1/"+heartbeatstream.Subresource):
			openings.Add(1)
		case strings.HasSuffix(req.URL.Path, "/nodes/stream-1/heartbeat"):
			requests.Add(1)
		}
		return false
	})
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Servers: []string{proxy}})
	ready := func(n *nodusv1.Node) bool {
		return meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady)
	}
	waitNode(t, s, "stream-1", ready)
	// Five more intervals: every beat a request, the node ready throughout,
	// and no other stream tried.
	seen := requests.Load()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "stream-1", metav1.GetOptions{})
		if err != nil || !ready(n) {
			t.Fatalf("the node went not ready behind the proxy: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := requests.Load() - seen; got < 3 {
		t.Errorf("%d beats as requests in 5 s at a 1 s interval", got)
	}
	if got := openings.Load(); got != 1 {
		t.Errorf("the agent opened %d streams through a proxy that cannot stream", got)
	}
}
