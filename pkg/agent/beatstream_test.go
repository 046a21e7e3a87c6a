package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/standin"
)

// These tests hold nodusd's choice between its heartbeat stream and a POST
// per beat to what it must do when a stream is refused or breaks: no beat
// lost, and no new stream opened on every beat when streams keep failing.
// The server's side is a stand-in that fails as a proxy, a stopping server
// or an older server would; nodus-server itself is the peer of the
// integration tests (TestNodusdBeatsOverAStream, and the audited server's
// and the proxy's).

// beatServer counts what an agent sent: the streams it opened, the beats
// they carried and the beats it POSTed.
type beatServer struct {
	openings, onStreams, posts atomic.Int32
}

// stream is how the stand-in serves an opening.
type stream struct {
	refuse   int  // the opening's status code, when not 0
	answered int  // the beats answered before the stream ends (-1: all)
	then     int  // the Status code of the beat after them, if not 0
	silent   bool // answer no beat at all
	busyAt   int  // the beat (from 1) answered 429, the stream going on
}

func serveBeats(t *testing.T, streams func(opening int) stream) (*beatServer, versioned.Interface) {
	t.Helper()
	b := &beatServer{}
	clients := standin.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/apis/nodus.dev/v1/nodes/n1/heartbeat":
			b.posts.Add(1)
			var hb nodusv1.NodeHeartbeat
			if err := json.NewDecoder(r.Body).Decode(&hb); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(&hb)
		case "/apis/nodus.dev/v1/nodes/n1/heartbeatstream":
			how := streams(int(b.openings.Add(1)))
			w.Header().Set("Content-Type", "application/json")
			if how.refuse != 0 {
				w.WriteHeader(how.refuse)
				_ = json.NewEncoder(w).Encode(status(how.refuse))
				return
			}
			w.WriteHeader(http.StatusOK)
			rc := http.NewResponseController(w)
			_ = rc.Flush()
			lines := bufio.NewScanner(r.Body)
			for n := 0; lines.Scan(); n++ {
				b.onStreams.Add(1)
				switch {
				case how.silent:
					continue
				case how.busyAt == n+1:
					_ = json.NewEncoder(w).Encode(status(http.StatusTooManyRequests))
					_ = rc.Flush()
					continue
				case how.answered >= 0 && n == how.answered:
					if how.then != 0 {
						_ = json.NewEncoder(w).Encode(status(how.then))
						_ = rc.Flush()
					}
					return
				}
				var hb nodusv1.NodeHeartbeat
				_ = json.Unmarshal(lines.Bytes(), &hb)
				hb.APIVersion, hb.Kind = nodusv1.SchemeGroupVersion.String(), "NodeHeartbeat"
				_ = json.NewEncoder(w).Encode(&hb)
				_ = rc.Flush()
			}
		default:
			http.NotFound(w, r)
		}
	}))
	return b, clients
}

// status is the Status nodus-server answers with code.
func status(code int) *metav1.Status {
	reason := map[int]metav1.StatusReason{
		http.StatusNotFound: metav1.StatusReasonNotFound, http.StatusMethodNotAllowed: metav1.StatusReasonMethodNotAllowed,
		http.StatusTooManyRequests: metav1.StatusReasonTooManyRequests, http.StatusServiceUnavailable: metav1.StatusReasonServiceUnavailable,
	}[code]
	return &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure, Code: int32(code),
		Reason: reason, Message: "from the stand-in"}
}

// beatsTo is an agent of node n1 beating every interval (a beat waits half
// of it for its answer on the stream) through clients. Its stream ends
// with the test, before the stand-in, which waits for its requests.
func beatsTo(t *testing.T, clients versioned.Interface, interval time.Duration) *Agent {
	a := &Agent{client: clients, id: identity{Node: "n1"}, interval: interval}
	t.Cleanup(func() {
		if a.beats.open != nil {
			a.beats.open.Close()
		}
	})
	return a
}

// beatOnce sends beat n (its generation) and fails the test unless it was
// answered as sent, whichever way it went.
func (a *Agent) beatOnce(t *testing.T, n int) {
	t.Helper()
	answer, err := a.send(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: int64(n)})
	if err != nil || answer == nil || answer.AgentGeneration != int64(n) {
		t.Fatalf("beat %d: answer %v, %v", n, answer, err)
	}
}

func (b *beatServer) saw(t *testing.T, when string, openings, onStreams, posts int32) {
	t.Helper()
	if o, s, p := b.openings.Load(), b.onStreams.Load(), b.posts.Load(); o != openings || s != onStreams || p != posts {
		t.Errorf("%s: %d openings, %d beats on streams, %d POSTs; want %d, %d, %d", when, o, s, p, openings, onStreams, posts)
	}
}

// TestABeatAStoppingServerRefusedOnItsStreamIsSentAgain: a server that
// shuts down answers the stream's beat 503 and ends it; the beat goes as a
// request (to whichever replica takes it), and the next opens a stream at
// once, since this one carried its beats.
func TestABeatAStoppingServerRefusedOnItsStreamIsSentAgain(t *testing.T) {
	b, clients := serveBeats(t, func(int) stream { return stream{answered: 3, then: http.StatusServiceUnavailable} })
	a := beatsTo(t, clients, 20*time.Second)
	for n := 1; n <= 4; n++ {
		a.beatOnce(t, n)
	}
	b.saw(t, "after the 503", 1, 4, 1)
	a.beatOnce(t, 5)
	b.saw(t, "the next beat", 2, 5, 1)
}

// TestABeatTheServerHadNoRoomForOnItsStreamGoesAsARequest: a 429 on the
// stream (no in-flight slot came free) is not the stream's end: the beat
// goes as a request, which meets the generic chain's limit and client-go's
// retries, and the next beat goes on the same stream.
func TestABeatTheServerHadNoRoomForOnItsStreamGoesAsARequest(t *testing.T) {
	b, clients := serveBeats(t, func(int) stream { return stream{answered: -1, busyAt: 2} })
	a := beatsTo(t, clients, 20*time.Second)
	for n := 1; n <= 3; n++ {
		a.beatOnce(t, n)
	}
	b.saw(t, "a beat answered 429 on the stream", 1, 3, 1)
}

// TestAStreamThatBreaksEarlyIsNotReopenedAtOnce: a proxy that cuts long
// requests would have each beat open a stream, and break it; after a
// stream that carried fewer than three beats, nodusd beats with requests
// for a while (streamFailedRetry).
func TestAStreamThatBreaksEarlyIsNotReopenedAtOnce(t *testing.T) {
	b, clients := serveBeats(t, func(int) stream { return stream{answered: 1} })
	a := beatsTo(t, clients, 20*time.Second)
	for n := 1; n <= 4; n++ {
		a.beatOnce(t, n)
	}
	b.saw(t, "a stream that carried one beat", 1, 2, 3)
	if wait := time.Until(a.beats.retryAt); wait < streamFailedRetry-5*time.Second || wait > streamFailedRetry {
		t.Errorf("the next stream is tried in %s, want %s", wait, streamFailedRetry)
	}
}

// TestARefusedOrSilentStreamGetsRequests: a server that refuses streams
// (404 from one that predates them, 405 from one that audits each beat),
// or a path that passes the opening on but not the beats, gets every beat
// as a request, and no opening for streamRefusedRetry.
func TestARefusedOrSilentStreamGetsRequests(t *testing.T) {
	for name, how := range map[string]stream{
		"404":    {refuse: http.StatusNotFound},
		"405":    {refuse: http.StatusMethodNotAllowed},
		"silent": {silent: true},
	} {
		t.Run(name, func(t *testing.T) {
			b, clients := serveBeats(t, func(int) stream { return how })
			interval := 20 * time.Second
			if how.silent {
				interval = 2 * time.Second // its beat waits 1 s for an answer that never comes
			}
			a := beatsTo(t, clients, interval)
			for n := 1; n <= 3; n++ {
				a.beatOnce(t, n)
			}
			onStreams := int32(0)
			if how.silent {
				onStreams = 1
			}
			b.saw(t, name, 1, onStreams, 3)
			if wait := time.Until(a.beats.retryAt); wait < streamRefusedRetry-5*time.Second || wait > streamRefusedRetry {
				t.Errorf("the next stream is tried in %s, want %s", wait, streamRefusedRetry)
			}
		})
	}
}

// TestAStreamOpenedAfterAFailedOneIsUsed: a failed opening (the network,
// a restarting server) is retried after streamFailedRetry, not the
// refused's ten minutes; a later opening that succeeds carries the beats.
func TestAStreamOpenedAfterAFailedOneIsUsed(t *testing.T) {
	b, clients := serveBeats(t, func(opening int) stream {
		if opening == 1 {
			return stream{refuse: http.StatusServiceUnavailable}
		}
		return stream{answered: -1}
	})
	a := beatsTo(t, clients, 20*time.Second)
	a.beatOnce(t, 1)
	if wait := time.Until(a.beats.retryAt); wait < streamFailedRetry-5*time.Second || wait > streamFailedRetry {
		t.Errorf("after a 503 at the opening the next stream is tried in %s, want %s", wait, streamFailedRetry)
	}
	a.beats.retryAt = time.Now() // as streamFailedRetry later
	for n := 2; n <= 4; n++ {
		a.beatOnce(t, n)
	}
	b.saw(t, "a stream after a failed opening", 2, 3, 1)
}

// TestABeatRequestTheServerNeverAnswersEndsInTime: a beat sent as a
// request waits for its answer no longer than the heartbeat interval, as a
// beat on the stream waits half of it. A server that keeps the connection
// alive but never answers (its handler stuck; HTTP/2's pings still
// answered, so the transport's health check never ends the connection)
// held the agent's beats for good, and its node died while nodusd waited;
// now the beat fails and is tried again, and a server that recovers gets
// the next.
func TestABeatRequestTheServerNeverAnswersEndsInTime(t *testing.T) {
	var posts atomic.Int32
	released := make(chan struct{})
	clients := standin.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/apis/nodus.dev/v1/nodes/n1/heartbeat":
			if posts.Add(1) == 1 {
				select { // stuck until the client gives up, or the test ends
				case <-r.Context().Done():
				case <-released:
				}
				return
			}
			var hb nodusv1.NodeHeartbeat
			_ = json.NewDecoder(r.Body).Decode(&hb)
			hb.APIVersion, hb.Kind = nodusv1.SchemeGroupVersion.String(), "NodeHeartbeat"
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(&hb)
		default: // no streams: every beat is a request
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(status(http.StatusNotFound))
		}
	}))
	t.Cleanup(func() { close(released) }) // before the stand-in waits for its handlers
	interval := 2 * time.Second
	a := beatsTo(t, clients, interval)

	sent := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := a.send(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: 1})
		sent <- err
	}()
	select {
	case err := <-sent:
		took := time.Since(start)
		if err == nil {
			t.Fatal("a beat the server never answered was taken as answered")
		}
		if took < interval || took > interval+3*time.Second {
			t.Errorf("the unanswered beat failed after %s, want about the interval (%s)", took, interval)
		}
		if !strings.Contains(err.Error(), "did not answer the heartbeat within 2s") {
			t.Errorf("the unanswered beat's error does not say what happened: %v", err)
		}
	case <-time.After(10 * interval):
		t.Fatalf("a beat the server never answered still waits after %s", 10*interval)
	}
	a.beatOnce(t, 2)
	if n := posts.Load(); n != 2 {
		t.Errorf("the server got %d heartbeat requests, want 2", n)
	}
}
