package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/heartbeatstream"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// heartbeat measures what heartbeats of many nodes cost the server and
// etcd: the first beat of each node (which creates its liveness lease and
// marks it ready), then the steady state, every node beating once per
// interval for a window, measured over the window; beats of nodes whose
// stored lastHeartbeatTime is old (what a periodic refresh of it would
// write, measured apart); and reserved nodes' beats with evidence, as fast
// as the server answers. Each node's beats go as its agent's: with the
// certificate its enrollment issued, over a heartbeat stream on a
// connection of its own (as nodusd sends them); the same paced beats go
// once more as a request each, for comparison.
func heartbeat(s *server, c config) error {
	ctx := context.Background()
	fmt.Fprintf(os.Stderr, "heartbeat: enrolling %d agents\n", c.nodes)
	start := time.Now()
	agents, err := enrollFleet(ctx, s, c.nodes, c.concurrency*4)
	if err != nil {
		return err
	}
	defer closeAgents(agents)
	enrolled := time.Since(start)
	unconnected, err := s.residentSet() // no agent's connection open yet
	if err != nil {
		return err
	}
	// Each agent beats over its heartbeat stream, as nodusd does.
	beat := func(i int) error {
		return agents[i].beat(ctx, fleetName(i), nodusv1.NodeHeartbeat{AgentGeneration: agents[i].generation})
	}
	first, err := measureRounds(ctx, s, "first beat of each node", 1, c.nodes, c.concurrency*4, beat)
	if err != nil {
		return err
	}
	// An unmeasured round: nodes whose first beat came more than three
	// intervals before their second (the first round opens every agent's
	// connection, and may take that long) were marked not ready meanwhile,
	// and their next beat writes them ready again — a recovery, not the
	// steady state.
	fmt.Fprintf(os.Stderr, "heartbeat: one settling round\n")
	if _, err := timedLatencies(c.nodes, c.concurrency*4, beat); err != nil {
		return err
	}
	// What the same server costs with no beat in a window, once the
	// controllers' answers to the first beats are done: the controllers,
	// the liveness resync, the runtime, every agent's connection open.
	// Shorter than an interval, so that no node goes three intervals
	// without a beat before the next round, which the steady state
	// follows at once.
	if err := s.quiesce(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "heartbeat: %s with no beat\n", min(c.heartbeatWindow, c.interval))
	idle, err := idleWindow(ctx, s, min(c.heartbeatWindow, c.interval))
	if err != nil {
		return err
	}
	if _, err := timedLatencies(c.nodes, c.concurrency*4, beat); err != nil {
		return err
	}
	// The steady state as a fleet makes it: every node once per interval,
	// each beat at its time, the server's CPU and etcd's writes measured
	// over the window (not rounds as fast as the server answers, divided
	// by their beats: background work would be spread over more beats).
	fmt.Fprintf(os.Stderr, "heartbeat: %s paced at %d nodes / %s\n", c.heartbeatWindow, c.nodes, c.interval)
	if err := s.quiesce(ctx); err != nil {
		return err
	}
	steady, err := paced(ctx, s, c, beat)
	if err != nil {
		return err
	}
	connected, err := s.residentSet() // every agent's connection open
	if err != nil {
		return err
	}
	// The same beats as a request each, over each agent's connection (as
	// nodusd sent them until session 47, and still does to a server that
	// refuses its stream): what the streams save. The streams are closed
	// first: an agent beats over one or the other, and a stream with no
	// beat for a while is ended by the server.
	closeStreams(agents)
	asRequests := func(i int) error {
		return testfleet.Heartbeat(ctx, agents[i].client, fleetName(i), nodusv1.NodeHeartbeat{AgentGeneration: agents[i].generation})
	}
	if err := s.quiesce(ctx); err != nil {
		return err
	}
	viaRequests, err := paced(ctx, s, c, asRequests)
	if err != nil {
		return err
	}
	// The same beats with the operator's certificate over one connection,
	// as the bench sent them until session 46, the agents' connections
	// open and idle: what each agent's own identity and connection add.
	operatorBeat := func(i int) error {
		return testfleet.Heartbeat(ctx, s.client, fleetName(i), nodusv1.NodeHeartbeat{AgentGeneration: agents[i].generation})
	}
	if err := s.quiesce(ctx); err != nil {
		return err
	}
	viaOperator, err := paced(ctx, s, c, operatorBeat)
	if err != nil {
		return err
	}
	// What a window shorter than a refresh period cannot show: until
	// session 46 each node's stored lastHeartbeatTime was written again
	// once it was 5 minutes old. Measured apart, on nodes whose stored time
	// is made an hour old.
	// The agents open their streams again, unmeasured.
	if _, err := timedLatencies(c.nodes, c.concurrency*4, beat); err != nil {
		return err
	}
	oldTime, plain, err := oldTimeCost(ctx, s, c, beat)
	if err != nil {
		return err
	}
	// A reserved node's agent names its reservation and the epoch it
	// applied in every beat: the evidence a release drains on.
	reserved := min(c.nodes, reservedBeaters)
	fmt.Fprintf(os.Stderr, "heartbeat: reserving %d of the nodes\n", reserved)
	evidence, err := reserveBeaters(ctx, s, reserved, c.concurrency*4)
	if err != nil {
		return err
	}
	beatWithEvidence := func(i int) error {
		return agents[i].beat(ctx, fleetName(i), nodusv1.NodeHeartbeat{AgentGeneration: agents[i].generation, Reservations: evidence[i : i+1]})
	}
	// The first beat with evidence records each node's applied epoch (a
	// write), which the controllers then project into each ReservedHost:
	// the steady state comes after both.
	if _, err := timedLatencies(reserved, c.concurrency*4, beatWithEvidence); err != nil {
		return err
	}
	// The other nodes too, unmeasured: since the paced window, the
	// old-time measurement and the reservations may have taken three
	// intervals, and their marking not ready (and ready again) would land
	// in the window.
	if _, err := timedLatencies(c.nodes-reserved, c.concurrency*4, func(i int) error { return beat(reserved + i) }); err != nil {
		return err
	}
	if err := s.quiesce(ctx); err != nil {
		return err
	}
	withEvidence, err := measureRounds(ctx, s, "reserved, with evidence", c.rounds*c.nodes/reserved, reserved, c.concurrency*4, beatWithEvidence)
	if err != nil {
		return err
	}
	// What a fleet's agents hold besides their streams: nodusd's watches,
	// each an informer on its agent's connection. The same paced beats
	// (the reserved nodes' with their evidence) without them and then with
	// all of them open: their memory on the server, and what they add to
	// the beats' cost. Last, so that no earlier window runs on the heap
	// they leave.
	fleetBeat := func(i int) error {
		if i < reserved {
			return beatWithEvidence(i)
		}
		return beat(i)
	}
	fmt.Fprintf(os.Stderr, "heartbeat: %s paced, %d of the nodes reserved\n", c.heartbeatWindow, reserved)
	if err := s.quiesce(ctx); err != nil {
		return err
	}
	withoutWatches, err := paced(ctx, s, c, fleetBeat)
	if err != nil {
		return err
	}
	notWatching, err := s.residentSet()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "heartbeat: opening %d agents' watches\n", c.nodes)
	start = time.Now()
	var watches *agentWatches
	// The agents beat meanwhile, as nodusd's do while its informers start:
	// opening takes longer than a stream waits for its next beat.
	// Eight agents at a time (-concurrency): 32 starved the beats on two
	// cores for longer than the streams wait, as a fleet's agents all
	// watching again at once would.
	err = beatingWhile(ctx, c, fleetBeat, func() (err error) {
		watches, err = openAgentWatches(ctx, s, agents, c.concurrency)
		return err
	})
	if err != nil {
		return fmt.Errorf("agents' watches: %w", err)
	}
	watchesOpened, openWatches := time.Since(start), watches.count()
	fmt.Fprintf(os.Stderr, "heartbeat: %s paced with the agents' watches open\n", c.heartbeatWindow)
	withWatches, watching, err := pacedWithWatches(ctx, s, c, fleetBeat)
	watches.stop()
	if err != nil {
		return err
	}
	rate := float64(c.nodes) / c.interval.Seconds()
	fmt.Printf("heartbeat: %d nodes, each beating with its own agent's certificate over its own heartbeat stream and connection (%d agents enrolled in %s); beats sent by %d workers\n",
		c.nodes, c.nodes, enrolled.Round(time.Second), c.concurrency*4)
	r := first
	fmt.Printf("  %-24s %6d beats in %-8s (%.0f/s)  p50 %-9s p99 %-9s\n", r.name+":", r.beats, r.elapsed.Round(time.Millisecond),
		float64(r.beats)/r.elapsed.Seconds(), r.p50, r.p99)
	fmt.Printf("  %-24s etcd writes %.3f and raft proposals %.3f per beat; server CPU %s per beat\n", "",
		float64(r.writes)/float64(r.beats), float64(r.proposals)/float64(r.beats), r.cpu/time.Duration(r.beats))
	r = steady
	fmt.Printf("  %-24s %6d beats paced over %-8s (%.0f/s)  p50 %-9s p99 %-9s\n", r.name+":", r.beats, r.elapsed.Round(time.Millisecond),
		float64(r.beats)/r.elapsed.Seconds(), r.p50, r.p99)
	fmt.Printf("  %-24s in the window: etcd writes %.3f and raft proposals %.3f per beat; server CPU %s per beat, %.2f cores\n", "",
		float64(r.writes)/float64(r.beats), float64(r.proposals)/float64(r.beats), r.cpu/time.Duration(r.beats), r.cpu.Seconds()/r.elapsed.Seconds())
	fmt.Printf("  %-24s the same server with no beat for %s, every agent connected: %.2f cores, %.1f etcd writes/s\n", "",
		idle.elapsed.Round(time.Second), idle.cpu.Seconds()/idle.elapsed.Seconds(), float64(idle.writes)/idle.elapsed.Seconds())
	fmt.Printf("  %-24s server RSS after the enrollments, before any agent's beat: %d MB (anonymous %d MB); at the end of the window,\n"+
		"  %-24s %d agents connected: %d MB (anonymous %d MB)\n", "", unconnected.rss>>20, unconnected.anon>>20,
		"", c.nodes, connected.rss>>20, connected.anon>>20)
	fmt.Printf("  %-24s the same paced beats as a request each over each agent's connection (nodusd until session 47), after the streams' window,\n"+
		"  %-24s the streams closed: p50 %s, p99 %s; etcd writes %.3f per beat; server CPU %s per beat, %.2f cores\n", "",
		"", viaRequests.p50, viaRequests.p99, float64(viaRequests.writes)/float64(viaRequests.beats),
		viaRequests.cpu/time.Duration(viaRequests.beats), viaRequests.cpu.Seconds()/viaRequests.elapsed.Seconds())
	fmt.Printf("  %-24s the same paced beats with the operator's certificate over one connection (the bench until session 46), after the agents' window,\n"+
		"  %-24s their connections open and idle: p50 %s, p99 %s; etcd writes %.3f per beat; server CPU %s per beat, %.2f cores\n", "",
		"", viaOperator.p50, viaOperator.p99, float64(viaOperator.writes)/float64(viaOperator.beats),
		viaOperator.cpu/time.Duration(viaOperator.beats), viaOperator.cpu.Seconds()/viaOperator.elapsed.Seconds())
	fmt.Printf("  %-24s beats of %d nodes whose stored lastHeartbeatTime is %s old (a periodic refresh of the stored time would write here),\n"+
		"  %-24s measured apart: etcd writes %.3f and raft proposals %.3f per beat; server CPU %s per beat, %s for the same nodes' next beat\n", "",
		oldTime.beats, oldTimeAge, "", float64(oldTime.writes)/float64(oldTime.beats), float64(oldTime.proposals)/float64(oldTime.beats),
		oldTime.cpu/time.Duration(oldTime.beats), plain.cpu/time.Duration(plain.beats))
	fmt.Printf("  %-24s at %d nodes / %s: %.1f etcd writes/s, %.1f raft proposals/s, %.2f server cores\n", "",
		c.nodes, c.interval, float64(r.writes)/r.elapsed.Seconds(), float64(r.proposals)/r.elapsed.Seconds(), r.cpu.Seconds()/r.elapsed.Seconds())
	r = withEvidence
	fmt.Printf("  %d of the nodes reserved, each beat naming its reservation and applied epoch (the agent's evidence), rounds as fast as the server answers:\n", reserved)
	fmt.Printf("  %-24s %6d beats in %-8s (%.0f/s)  p50 %-9s p99 %-9s\n", r.name+":", r.beats, r.elapsed.Round(time.Millisecond),
		float64(r.beats)/r.elapsed.Seconds(), r.p50, r.p99)
	fmt.Printf("  %-24s etcd writes %.3f and raft proposals %.3f per beat; server CPU %s per beat; %.2f cores if all %d nodes were reserved\n", "",
		float64(r.writes)/float64(r.beats), float64(r.proposals)/float64(r.beats), r.cpu/time.Duration(r.beats),
		(r.cpu/time.Duration(r.beats)).Seconds()*rate, c.nodes)
	fmt.Printf("  the same paced beats at %d nodes / %s, %d of them reserved (their beats with evidence), after the rounds above:\n", c.nodes, c.interval, reserved)
	for _, w := range []struct {
		what string
		r    heartbeatRound
		rss  residentSet
	}{
		{"no watch open:", withoutWatches, notWatching},
		{fmt.Sprintf("every agent's watches open as nodusd holds them (its reservations, its Node, the executions on its host: %d watches, opened in %s):",
			openWatches, watchesOpened.Round(time.Second)), withWatches, watching},
	} {
		fmt.Printf("  %-24s %s\n  %-24s p50 %s, p99 %s; etcd writes %.3f per beat; server CPU %s per beat, %.2f cores; server RSS %d MB (anonymous %d MB)\n",
			"", w.what, "", w.r.p50, w.r.p99, float64(w.r.writes)/float64(w.r.beats), w.r.cpu/time.Duration(w.r.beats),
			w.r.cpu.Seconds()/w.r.elapsed.Seconds(), w.rss.rss>>20, w.rss.anon>>20)
	}
	brokenStreams.Lock()
	fmt.Printf("  %-24s agents' heartbeat streams that broke (their beat sent as a request, a new stream opened at the next): %d %q\n", "",
		brokenStreams.count, brokenStreams.reasons)
	fmt.Printf("  %-24s agents' beats the server had no room for on their stream (answered 429, sent as a request): %d\n", "", brokenStreams.busy)
	brokenStreams.Unlock()
	fmt.Printf("  between the first beats and the idle window one unmeasured round lets nodes marked not ready meanwhile recover;\n" +
		"  another one between the idle window and the steady state.\n\n")
	return nil
}

// agent is a simulated node's agent: a client with the certificate its
// enrollment issued, on a connection of its own, the generation its beats
// name, and its heartbeat stream once it beat.
type agent struct {
	client     versioned.Interface
	http       *http.Client
	generation int64

	mu     sync.Mutex // one beat at a time on the stream
	stream *heartbeatstream.Stream
}

// brokenStreams counts the agents' streams that broke, and keeps the first
// few reasons: nodusd sends such a beat as a request and opens another
// stream at its next beat, and so does the bench. busy counts the beats
// answered 429 on their stream, which go as a request too.
var brokenStreams struct {
	sync.Mutex
	count   int
	reasons []string
	busy    int
}

// beat sends hb as node's agent on its heartbeat stream, opening it first,
// as nodusd does: a beat whose stream broke goes as a request, and the next
// beat opens a new stream; a beat the server had no room for on the stream
// (429) goes as a request, and the stream stays.
func (a *agent) beat(ctx context.Context, node string, hb nodusv1.NodeHeartbeat) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stream == nil {
		s, err := heartbeatstream.Open(ctx, a.client.NodusV1().RESTClient(), node, time.Minute)
		if err != nil {
			return fmt.Errorf("opening the heartbeat stream of %s: %w", node, err)
		}
		a.stream = s
	}
	_, err := a.stream.Beat(ctx, &hb, time.Minute)
	if apierrors.IsTooManyRequests(err) {
		brokenStreams.Lock()
		brokenStreams.busy++
		brokenStreams.Unlock()
		return testfleet.Heartbeat(ctx, a.client, node, hb)
	}
	if !errors.Is(err, heartbeatstream.ErrBroken) {
		return err
	}
	a.stream = nil
	brokenStreams.Lock()
	if brokenStreams.count++; len(brokenStreams.reasons) < 3 {
		brokenStreams.reasons = append(brokenStreams.reasons, fmt.Sprintf("%s at %s: %v", node, time.Now().Format(time.TimeOnly), err))
	}
	brokenStreams.Unlock()
	return testfleet.Heartbeat(ctx, a.client, node, hb)
}

// enrollFleet creates project and pool "bench" and enrolls n nodes into
// the pool through the enrollment API as nodusd does (an enrollment token
// each, a key of its own and a certificate request), and returns their
// agents. The tokens go over one connection: nodusd's enrollment keeps
// two of its own, and 10,000 of them would hold as many open files in
// this process.
func enrollFleet(ctx context.Context, s *server, n, conc int) ([]agent, error) {
	if need := uint64(n + 1000); !enoughFiles(need) {
		return nil, fmt.Errorf("%d agents' connections need %d open files in this process and the server's; raise ulimit -n (the hard limit)", n, need)
	}
	if err := seedFleet(ctx, s, 0, conc, false); err != nil {
		return nil, err
	}
	tokens, err := rest.TransportFor(&rest.Config{Host: s.config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.config.CAData}})
	if err != nil {
		return nil, err
	}
	agents := make([]agent, n)
	spec := nodusv1.EnrollmentTokenSpec{Pool: "bench", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}
	err = parallel(n, conc, func(i int) error {
		name := fleetName(i)
		tok, err := s.client.NodusV1().EnrollmentTokens().Create(ctx, &nodusv1.EnrollmentToken{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}, Spec: spec},
			metav1.CreateOptions{})
		if err != nil {
			return err
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		enrolling, err := versioned.NewForConfig(&rest.Config{Host: s.config.Host, BearerToken: tok.Status.Token, Transport: tokens})
		if err != nil {
			return err
		}
		answer, err := enrolling.NodusV1().Nodes().Enroll(ctx, name,
			&nodusv1.NodeEnrollment{CertificateRequest: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}))}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("enrolling %s: %w", name, err)
		}
		cfg := &rest.Config{Host: s.config.Host, QPS: -1, TLSClientConfig: rest.TLSClientConfig{CertData: []byte(answer.Certificate),
			KeyData: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), CAData: []byte(answer.CA)}}
		if agents[i].http, err = rest.HTTPClientFor(cfg); err != nil {
			return err
		}
		agents[i].generation = answer.AgentGeneration
		agents[i].client, err = versioned.NewForConfigAndClient(cfg, agents[i].http)
		return err
	})
	if err != nil {
		closeAgents(agents)
	}
	return agents, err
}

// closeAgents closes the agents' heartbeat streams and connections.
func closeAgents(agents []agent) {
	closeStreams(agents)
	for i := range agents {
		if agents[i].http != nil {
			agents[i].http.CloseIdleConnections()
		}
	}
}

// closeStreams closes the agents' heartbeat streams; their next beats open
// new ones.
func closeStreams(agents []agent) {
	for i := range agents {
		a := &agents[i]
		a.mu.Lock()
		if a.stream != nil {
			a.stream.Close()
			a.stream = nil
		}
		a.mu.Unlock()
	}
}

// enoughFiles says whether this process may open need files (Go raises the
// soft limit to the hard one at start, and so does the server).
func enoughFiles(need uint64) bool {
	var limit syscall.Rlimit
	return syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit) != nil || limit.Cur >= need
}

// paced beats every node once per c.interval for c.heartbeatWindow, each
// beat at its time, and measures the server over the window.
func paced(ctx context.Context, s *server, c config, beat func(i int) error) (heartbeatRound, error) {
	m, err := s.startMeter(ctx)
	if err != nil {
		return heartbeatRound{}, err
	}
	total := int(float64(c.nodes) / c.interval.Seconds() * c.heartbeatWindow.Seconds())
	lat := make([]time.Duration, total)
	start := time.Now()
	if err := pace(ctx, c, total, lat, beat); err != nil {
		return heartbeatRound{}, err
	}
	elapsed := time.Since(start)
	cpu, writes, proposals, err := m.stop(ctx)
	if err != nil {
		return heartbeatRound{}, err
	}
	if late := elapsed - c.heartbeatWindow; late > c.heartbeatWindow/20 {
		return heartbeatRound{}, fmt.Errorf("the paced beats took %s for a window of %s: the server (or this machine) does not keep up with %.0f beats/s",
			elapsed, c.heartbeatWindow, float64(c.nodes)/c.interval.Seconds())
	}
	p50, p99 := percentiles(lat)
	return heartbeatRound{"steady state", total, elapsed, cpu, writes, proposals, p50, p99}, nil
}

// pace sends beats k = 0, 1, … (of node k mod c.nodes) at c.nodes per
// c.interval, each at its time, from c.concurrency*4 workers, until total
// are sent, or until ctx ends when total is negative. It records each
// beat's latency in lat, when given, and returns the first beat's error,
// once every beat sent has returned.
func pace(ctx context.Context, c config, total int, lat []time.Duration, beat func(i int) error) error {
	rate := float64(c.nodes) / c.interval.Seconds()
	jobs := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range c.concurrency * 4 {
		wg.Go(func() {
			for k := range jobs {
				t := time.Now()
				if err := beat(k % c.nodes); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
				if lat != nil {
					lat[k] = time.Since(t)
				}
			}
		})
	}
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
send:
	for sent := 0; total < 0 || sent < total; {
		select {
		case <-ctx.Done():
			break send
		case <-tick.C:
		}
		due := int(rate * time.Since(start).Seconds())
		if total >= 0 {
			due = min(due, total)
		}
		for ; sent < due; sent++ {
			select {
			case jobs <- sent:
			case <-ctx.Done():
				break send
			}
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// idleWindow measures the server over window with no beat sent.
func idleWindow(ctx context.Context, s *server, window time.Duration) (heartbeatRound, error) {
	m, err := s.startMeter(ctx)
	if err != nil {
		return heartbeatRound{}, err
	}
	start := time.Now()
	time.Sleep(window)
	elapsed := time.Since(start)
	cpu, writes, proposals, err := m.stop(ctx)
	if err != nil {
		return heartbeatRound{}, err
	}
	return heartbeatRound{name: "idle", elapsed: elapsed, cpu: cpu, writes: writes, proposals: proposals}, nil
}

// oldTimeSample is how many nodes the beats on an old stored
// lastHeartbeatTime are measured on.
const oldTimeSample = 1000

// oldTimeAge is how old their stored lastHeartbeatTime is made: older than
// any refresh period a server might have.
const oldTimeAge = time.Hour

// oldTimeCost measures beats of nodes whose stored lastHeartbeatTime was
// made oldTimeAge old (which is not measured) and, for the same nodes
// right after, their next beat.
func oldTimeCost(ctx context.Context, s *server, c config, beat func(i int) error) (oldTime, plain heartbeatRound, err error) {
	n := min(oldTimeSample, c.nodes)
	// The other nodes beat once, unmeasured, before each window: no lease
	// expires in one (its NotReady and recorded beat would count).
	others := func() error {
		_, err := timedLatencies(c.nodes-n, c.concurrency*4, func(i int) error { return beat(n + i) })
		return err
	}
	old := metav1.NewTime(time.Now().Add(-oldTimeAge))
	if err := parallel(n, c.concurrency*4, func(i int) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := s.client.NodusV1().Nodes().Get(ctx, fleetName(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Status.LastHeartbeatTime = &old
			_, err = s.client.NodusV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{})
			return err
		})
	}); err != nil {
		return oldTime, plain, fmt.Errorf("making stored heartbeat times old: %w", err)
	}
	if err := others(); err != nil {
		return oldTime, plain, err
	}
	if err := s.quiesce(ctx); err != nil {
		return oldTime, plain, err
	}
	// Both windows end as long after their last beat: the difference is
	// what the old time makes a beat write, and what that sets off.
	const settle = 2 * time.Second
	if oldTime, err = measureSettled(ctx, s, "old stored time", 1, n, c.concurrency*4, beat, settle); err != nil {
		return oldTime, plain, err
	}
	if err := others(); err != nil {
		return oldTime, plain, err
	}
	if err := s.quiesce(ctx); err != nil {
		return oldTime, plain, err
	}
	plain, err = measureSettled(ctx, s, "next beat", 1, n, c.concurrency*4, beat, settle)
	return oldTime, plain, err
}

// heartbeatRound is what a window of beats cost.
type heartbeatRound struct {
	name              string
	beats             int
	elapsed, cpu      time.Duration
	writes, proposals int64
	p50, p99          time.Duration
}

// measureRounds beats nodes 0..nodes-1 rounds times, as fast as conc
// workers are answered, and measures the server over it.
func measureRounds(ctx context.Context, s *server, name string, rounds, nodes, conc int, beat func(i int) error) (heartbeatRound, error) {
	return measureSettled(ctx, s, name, rounds, nodes, conc, beat, 0)
}

// measureSettled is measureRounds, the window ending settle after the last
// beat is answered: what the beats' writes set off (the watch caches,
// the controllers' informers) is then in it.
func measureSettled(ctx context.Context, s *server, name string, rounds, nodes, conc int, beat func(i int) error, settle time.Duration) (heartbeatRound, error) {
	m, err := s.startMeter(ctx)
	if err != nil {
		return heartbeatRound{}, err
	}
	start := time.Now()
	var lat []time.Duration
	for r := 0; r < rounds; r++ {
		res, err := timedLatencies(nodes, conc, beat)
		if err != nil {
			return heartbeatRound{}, err
		}
		lat = append(lat, res...)
	}
	time.Sleep(settle)
	elapsed := time.Since(start)
	cpu, writes, proposals, err := m.stop(ctx)
	if err != nil {
		return heartbeatRound{}, err
	}
	p50, p99 := percentiles(lat)
	return heartbeatRound{name, rounds * nodes, elapsed, cpu, writes, proposals, p50, p99}, nil
}

// reservedBeaters is how many of the heartbeat scenario's nodes are
// reserved for its window of beats with evidence.
const reservedBeaters = 2000

// reserveBeaters reserves the first n nodes of the fleet, each to its own
// reservation (named after the node), waits until all are active, and
// returns the evidence each node's agent would send: its reservation at
// the epoch it applied, nobody logged in.
func reserveBeaters(ctx context.Context, s *server, n, conc int) ([]nodusv1.ReservationEvidence, error) {
	now := time.Now().Truncate(time.Second)
	if err := parallel(n, conc, func(i int) error {
		return testfleet.Reserve(ctx, s.client, fleetName(i), "bench", nodusv1.ReservationPlacement{Node: fleetName(i)}, now.Add(-time.Hour), now.Add(24*time.Hour))
	}); err != nil {
		return nil, err
	}
	if err := waitActive(ctx, s, n); err != nil {
		return nil, err
	}
	list, err := s.client.NodusV1().Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	epochs := map[string]int64{}
	for _, r := range list.Items {
		epochs[r.Name] = r.Status.Epoch
	}
	evidence := make([]nodusv1.ReservationEvidence, n)
	for i := range evidence {
		evidence[i] = nodusv1.ReservationEvidence{Name: fleetName(i), AppliedEpoch: epochs[fleetName(i)]}
	}
	return evidence, nil
}

// beatingWhile runs fn while every node beats once per c.interval,
// unmeasured, and returns fn's error, or the first beat's that failed.
func beatingWhile(ctx context.Context, c config, beat func(i int) error, fn func() error) error {
	beating, stop := context.WithCancel(ctx)
	defer stop()
	beats := make(chan error, 1)
	go func() { beats <- pace(beating, c, -1, nil, beat) }()
	err := fn()
	stop()
	beatErr := <-beats
	switch {
	case err != nil:
		return err
	case errors.Is(beatErr, context.Canceled) && ctx.Err() == nil:
		return nil // stopped here, once fn was done
	default:
		return beatErr
	}
}

// pacedWithWatches measures the paced beats once the agents' watches are
// open, and the server's RSS at the window's end. Nodes whose beats came
// late while the watches opened may have been marked not ready: an
// unmeasured round first, as between the other windows.
func pacedWithWatches(ctx context.Context, s *server, c config, beat func(i int) error) (heartbeatRound, residentSet, error) {
	if _, err := timedLatencies(c.nodes, c.concurrency*4, beat); err != nil {
		return heartbeatRound{}, residentSet{}, err
	}
	if err := s.quiesce(ctx); err != nil {
		return heartbeatRound{}, residentSet{}, err
	}
	r, err := paced(ctx, s, c, beat)
	if err != nil {
		return heartbeatRound{}, residentSet{}, err
	}
	rss, err := s.residentSet()
	return r, rss, err
}

// quiesce waits until etcd's revision has not moved for a second: the
// writes the controllers make in answer to the last ones are done.
func (s *server) quiesce(ctx context.Context) error {
	last, _, err := s.etcdCounters(ctx)
	if err != nil {
		return err
	}
	for range 60 {
		time.Sleep(time.Second)
		now, _, err := s.etcdCounters(ctx)
		if err != nil {
			return err
		}
		if now == last {
			return nil
		}
		last = now
	}
	return fmt.Errorf("etcd's revision still moves after a minute")
}

// timedLatencies runs op n times on conc workers and returns each latency.
func timedLatencies(n, conc int, op func(i int) error) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	err := parallel(n, conc, func(i int) error {
		t := time.Now()
		err := op(i)
		lat[i] = time.Since(t)
		return err
	})
	return lat, err
}

// meter reads the server's CPU time and etcd's counters at the start of a
// window.
type meter struct {
	s               *server
	cpu             time.Duration
	revision, index int64
}

func (s *server) startMeter(ctx context.Context) (meter, error) {
	revision, index, err := s.etcdCounters(ctx)
	if err != nil {
		return meter{}, err
	}
	cpu, err := s.cpu()
	return meter{s: s, cpu: cpu, revision: revision, index: index}, err
}

// stop is what the server spent since the start: CPU time, etcd writes
// (revisions) and raft proposals.
func (m meter) stop(ctx context.Context) (cpu time.Duration, writes, proposals int64, err error) {
	now, err := m.s.cpu()
	if err != nil {
		return 0, 0, 0, err
	}
	revision, index, err := m.s.etcdCounters(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	return now - m.cpu, revision - m.revision, index - m.index, nil
}
