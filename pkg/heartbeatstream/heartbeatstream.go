// Package heartbeatstream is the agent's end of a heartbeat stream: one
// long-lived POST /apis/nodus.dev/v1/nodes/{name}/heartbeatstream that
// carries a node's beats, instead of a request each. At 10,000 nodes a
// request per beat is a thousand HTTP/2 streams a second opened, routed,
// answered and closed; on a stream a beat is a line each way.
//
// The request body is NodeHeartbeat objects in JSON, one per line; the
// response body is one line per beat, in the order sent: the NodeHeartbeat
// that POST nodes/{name}/heartbeat answers, or the Status it fails with.
// The server authenticates and authorizes every beat anew, with the
// stream's certificate, and runs it through the same admission and storage
// as a POST. It ends the stream after a beat its credential no longer
// authenticates or is allowed, when the server shuts down, when the agent
// opens another stream to the same server, and when no beat came for a
// while (IdleLimit).
package heartbeatstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/answerbound"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// Subresource is the stream's subresource of nodes.
const Subresource = "heartbeatstream"

// IdleLimit is how long the server waits for the next beat on a stream,
// given the heartbeat interval: a node that long without a beat is not
// ready anyway (three intervals), and its stream holds nothing for it.
func IdleLimit(interval time.Duration) time.Duration { return 3*interval + 10*time.Second }

// ErrBroken says that the stream ended or failed: no answer will come on
// it. The beat may or may not have reached the server; send it again (on a
// new stream, or as a POST).
var ErrBroken = errors.New("the heartbeat stream ended")

// Stream is an open heartbeat stream. Beat is not for concurrent use.
type Stream struct {
	in      *io.PipeWriter
	ctx     context.Context
	cancel  context.CancelFunc
	answers chan answer
	once    sync.Once

	mu  sync.Mutex
	err error // why the answers ended
}

type answer struct {
	beat *nodusv1.NodeHeartbeat
	err  error
}

// ErrNoAnswer says that the opening of a stream was not answered in time:
// something between the agent and the server may not stream (a proxy on
// Go's HTTP/1.1 server, which reads up to 256 KiB more of a request's body
// before it writes an answer).
var ErrNoAnswer = errors.New("the heartbeat stream's opening was not answered in time")

// Open opens a heartbeat stream for node over c, a client of nodus.dev/v1
// (its transport's connection, and its credential). It returns when the
// server answered the opening, or after timeout with ErrNoAnswer: a server
// that does not serve streams answers an error (404 from one that predates
// them, 405 from one whose audit policy records each beat), and the caller
// beats with POSTs.
func Open(ctx context.Context, c rest.Interface, node string, timeout time.Duration) (*Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	r, w := io.Pipe()
	// A cancelled request does not end a transport that waits on the body:
	// ending the body does.
	var timedOut atomic.Bool
	timer := time.AfterFunc(timeout, func() {
		timedOut.Store(true)
		_ = w.CloseWithError(ErrNoAnswer)
		cancel()
	})
	// Its answers are bounded line by line (read), not as a whole by a
	// client's transport (answerbound): the stream lasts as long as the
	// agent beats.
	body, err := c.Post().Resource("nodes").Name(node).SubResource(Subresource).
		SetHeader("Content-Type", "application/json").Body(io.Reader(r)).Stream(answerbound.Streamed(ctx))
	timer.Stop()
	if err == nil && timedOut.Load() {
		body.Close()
		err = ErrNoAnswer
	}
	if err != nil {
		cancel()
		_ = w.CloseWithError(err)
		if timedOut.Load() && !errors.Is(err, ErrNoAnswer) {
			err = fmt.Errorf("%w: %v", ErrNoAnswer, err)
		}
		return nil, err
	}
	s := &Stream{in: w, ctx: ctx, cancel: cancel, answers: make(chan answer, 1)}
	// A cancelled request does not end the stream: the HTTP/2 transport
	// keeps reading its body for the server. Ending the body does.
	context.AfterFunc(ctx, s.Close)
	go s.read(body)
	return s, nil
}

// maxAnswer bounds an answer line the agent reads: a beat's answer echoes
// the beat, which the server takes up to 256 KiB of.
const maxAnswer = 512 << 10

// read decodes the server's answers until the stream ends.
func (s *Stream) read(body io.ReadCloser) {
	defer body.Close()
	defer close(s.answers)
	defer s.Close() // the server ended it: the request body's writer is done too
	lines := bufio.NewScanner(body)
	lines.Buffer(make([]byte, 0, 4<<10), maxAnswer)
	for lines.Scan() {
		line := bytes.TrimSpace(lines.Bytes())
		if len(line) == 0 {
			continue
		}
		select {
		case s.answers <- decode(line):
		case <-s.ctx.Done(): // closed: nobody takes answers any more
			return
		}
	}
	err := lines.Err()
	if err == nil {
		err = io.EOF
	}
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// decode reads one answer: a NodeHeartbeat, or the Status of a refusal.
func decode(line []byte) answer {
	var kind metav1.TypeMeta
	if err := json.Unmarshal(line, &kind); err != nil {
		return answer{err: fmt.Errorf("%w: the server's answer does not decode: %v", ErrBroken, err)}
	}
	switch kind.Kind {
	case "Status":
		var status metav1.Status
		if err := json.Unmarshal(line, &status); err != nil {
			return answer{err: fmt.Errorf("%w: the server's refusal does not decode: %v", ErrBroken, err)}
		}
		return answer{err: &apierrors.StatusError{ErrStatus: status}}
	case "NodeHeartbeat":
		var beat nodusv1.NodeHeartbeat
		if err := json.Unmarshal(line, &beat); err != nil {
			return answer{err: fmt.Errorf("%w: the server's answer does not decode: %v", ErrBroken, err)}
		}
		return answer{beat: &beat}
	}
	return answer{err: fmt.Errorf("%w: the server answered a %q", ErrBroken, kind.Kind)}
}

// Beat sends hb and returns the server's answer: the beat as the server
// took it, or its refusal (a *StatusError, as a POST's). An error wrapping
// ErrBroken means the stream is of no further use; Beat closes it. A beat
// not answered within timeout breaks the stream.
func (s *Stream) Beat(ctx context.Context, hb *nodusv1.NodeHeartbeat, timeout time.Duration) (*nodusv1.NodeHeartbeat, error) {
	line, err := json.Marshal(hb)
	if err != nil {
		return nil, err
	}
	// A write blocks while the server reads nothing (its flow control):
	// the timer unblocks it by ending the stream.
	timer := time.AfterFunc(timeout, s.Close)
	defer timer.Stop()
	if _, err := s.in.Write(append(line, '\n')); err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: %v", ErrBroken, err)
	}
	select {
	case a, open := <-s.answers:
		if !open {
			s.Close()
			return nil, fmt.Errorf("%w: %v", ErrBroken, s.ended())
		}
		if a.err != nil && errors.Is(a.err, ErrBroken) {
			s.Close()
		}
		return a.beat, a.err
	case <-ctx.Done():
		s.Close() // the answer, if it comes, would be taken for the next beat's
		return nil, fmt.Errorf("%w: %v", ErrBroken, ctx.Err())
	}
}

// ended is why the answers ended.
func (s *Stream) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return errors.New("closed")
	}
	return s.err
}

// Close ends the stream: the request's body ends, and the server ends its
// answers. It is safe to call more than once, and at once with Beat. A
// cancelled Open context closes the stream too.
func (s *Stream) Close() {
	s.once.Do(func() {
		_ = s.in.Close()
		s.cancel()
	})
}
