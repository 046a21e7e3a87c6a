package heartbeatstream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/standin"
)

// These tests hold the client to its contract against servers that do
// what nodus-server never does on purpose (answer nothing, end a stream
// halfway, send garbage): the ways a network, a proxy or an older server
// fail it. nodus-server itself is the peer of the integration tests
// (test/integration/heartbeat_stream_test.go).

const streamPath = "/apis/nodus.dev/v1/nodes/n1/" + Subresource

// server is a stand-in for nodus-server's port whose handler of the
// stream's path is serve; ended is sent to when a stream's request ended on
// the server's side (its body can no longer be read).
func server(t *testing.T, serve func(w http.ResponseWriter, r *http.Request)) (rest.Interface, <-chan struct{}) {
	t.Helper()
	ended := make(chan struct{}, 16)
	clients := standin.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != streamPath {
			http.NotFound(w, r)
			return
		}
		defer func() { ended <- struct{}{} }()
		serve(w, r)
	}))
	return clients.NodusV1().RESTClient(), ended
}

// echo answers each beat with itself, as the server answers a beat it
// took, or with a 409 Status for generation 13; after beats answers it
// returns, ending the stream (0: never).
func echo(beats int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		lines := bufio.NewScanner(r.Body)
		for n := 1; lines.Scan(); n++ {
			var hb nodusv1.NodeHeartbeat
			if err := json.Unmarshal(lines.Bytes(), &hb); err != nil {
				return
			}
			var answer any = &hb
			hb.APIVersion, hb.Kind = nodusv1.SchemeGroupVersion.String(), "NodeHeartbeat"
			if hb.AgentGeneration == 13 {
				answer = &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
					Code: http.StatusConflict, Reason: "StaleAgent", Message: "a newer agent"}
			}
			line, _ := json.Marshal(answer)
			if _, err := w.Write(append(line, '\n')); err != nil || rc.Flush() != nil {
				return
			}
			if n == beats {
				return
			}
		}
	}
}

func waitEnded(t *testing.T, ended <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the server's request did not end", what)
	}
}

// TestBeatsAreAnsweredInOrder: each beat gets its own answer, a refusal is
// the Status as a POST's error, and the stream goes on after it.
func TestBeatsAreAnsweredInOrder(t *testing.T) {
	c, ended := server(t, echo(0))
	s, err := Open(context.Background(), c, "n1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, generation := range []int64{1, 2, 13, 3} {
		answer, err := s.Beat(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: generation}, 5*time.Second)
		if generation == 13 {
			if reason := apierrors.ReasonForError(err); reason != "StaleAgent" || answer != nil {
				t.Fatalf("beat %d: %v (reason %q), answer %v; want the server's refusal", generation, err, reason, answer)
			}
			continue
		}
		if err != nil || answer == nil || answer.AgentGeneration != generation {
			t.Fatalf("beat %d: answer %v, %v", generation, answer, err)
		}
	}
	s.Close()
	waitEnded(t, ended, "a closed stream")
}

// TestARefusedOpeningIsTheServersError: a server that does not serve
// streams answers the opening, and the caller reads why as a POST's error.
func TestARefusedOpeningIsTheServersError(t *testing.T) {
	c, _ := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMethodNotAllowed)
		_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
			Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed, Message: "heartbeat streams are not served"})
	})
	s, err := Open(context.Background(), c, "n1", 5*time.Second)
	if s != nil || !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("a refused opening: %v, %v", s, err)
	}
}

// TestAnOpeningNotAnsweredIsGivenUp: something between the agent and the
// server reads the body and answers nothing (a proxy that buffers it).
// Open gives up in time, and ends the request rather than leaving it open.
func TestAnOpeningNotAnsweredIsGivenUp(t *testing.T) {
	c, ended := server(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	start := time.Now()
	s, err := Open(context.Background(), c, "n1", time.Second)
	if s != nil || !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("an opening not answered: %v, %v", s, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Open returned after %s, with a timeout of 1s", took)
	}
	waitEnded(t, ended, "an opening given up")
}

// TestAStreamTheServerEndedIsBroken: the beat after the server's end gets
// ErrBroken (send it again), not an answer nor a refusal.
func TestAStreamTheServerEndedIsBroken(t *testing.T) {
	c, ended := server(t, echo(1))
	s, err := Open(context.Background(), c, "n1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Beat(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: 1}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, ended, "the server's end")
	if answer, err := s.Beat(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: 1}, 5*time.Second); !errors.Is(err, ErrBroken) || answer != nil {
		t.Fatalf("a beat after the server ended the stream: %v, %v", answer, err)
	}
}

// TestABeatNotAnsweredInTimeBreaksTheStream: a late answer would be taken
// for the next beat's, so the stream ends, on both sides.
func TestABeatNotAnsweredInTimeBreaksTheStream(t *testing.T) {
	read := make(chan struct{}, 1)
	c, ended := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		lines := bufio.NewScanner(r.Body)
		for lines.Scan() {
			read <- struct{}{} // and no answer
		}
	})
	s, err := Open(context.Background(), c, "n1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if answer, err := s.Beat(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: 1}, 300*time.Millisecond); !errors.Is(err, ErrBroken) || answer != nil {
		t.Fatalf("a beat not answered: %v, %v", answer, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Beat returned after %s, with a timeout of 300ms", took)
	}
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the beat did not reach the server")
	}
	waitEnded(t, ended, "a stream whose beat was not answered")
	if _, err := s.Beat(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: 1}, 5*time.Second); !errors.Is(err, ErrBroken) {
		t.Errorf("a beat on the broken stream: %v", err)
	}
}

// TestAnAnswerThatDoesNotDecodeBreaksTheStream: the next answers could not
// be told apart either.
func TestAnAnswerThatDoesNotDecodeBreaksTheStream(t *testing.T) {
	for name, line := range map[string]string{
		"not JSON":       "{\"kind\":",
		"another kind":   `{"apiVersion":"v1","kind":"Pod"}`,
		"a bad beat":     `{"apiVersion":"nodus.dev/v1","kind":"NodeHeartbeat","agentGeneration":"x"}`,
		"a bad refusal":  `{"apiVersion":"v1","kind":"Status","code":"x"}`,
		"no kind at all": `{}`,
	} {
		t.Run(name, func(t *testing.T) {
			c, ended := server(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusOK)
				rc := http.NewResponseController(w)
				_ = rc.Flush()
				lines := bufio.NewScanner(r.Body)
				for lines.Scan() {
					_, _ = w.Write([]byte(line + "\n"))
					_ = rc.Flush()
				}
			})
			s, err := Open(context.Background(), c, "n1", 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if answer, err := s.Beat(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: 1}, 5*time.Second); !errors.Is(err, ErrBroken) || answer != nil {
				t.Fatalf("answer %q: %v, %v", line, answer, err)
			}
			waitEnded(t, ended, "a stream whose answer did not decode")
		})
	}
}

// TestCancellingTheOpeningsContextEndsTheStream: nodusd stopping ends its
// stream on the server too.
func TestCancellingTheOpeningsContextEndsTheStream(t *testing.T) {
	c, ended := server(t, echo(0))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Open(ctx, c, "n1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Beat(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: 1}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	cancel()
	waitEnded(t, ended, "a stream whose context ended")
	if _, err := s.Beat(context.Background(), &nodusv1.NodeHeartbeat{AgentGeneration: 1}, 5*time.Second); !errors.Is(err, ErrBroken) {
		t.Errorf("a beat after the context ended: %v", err)
	}
}
