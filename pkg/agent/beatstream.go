package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/heartbeatstream"
)

// beatStream is the agent's heartbeat stream: its beats go over one
// long-lived request (package heartbeatstream), which costs the server a
// fraction of a request per beat. A server that does not serve streams,
// or one that ended the stream, gets the beat as a POST.
type beatStream struct {
	open *heartbeatstream.Stream
	// carried is how many beats the open stream carried.
	carried int
	// retryAt is when to try opening a stream again after a refusal, or
	// after a stream that broke before it carried a few beats (a proxy that
	// cuts long requests would have every beat open one).
	retryAt time.Time
}

const (
	// streamRefusedRetry is how long the agent beats with POSTs after a
	// server refused its stream (one that predates streams: 404; one that
	// audits each beat: 405): a server's configuration changes rarely.
	streamRefusedRetry = 10 * time.Minute
	// streamFailedRetry is how long after an opening that failed otherwise
	// (the network, a restarting server).
	streamFailedRetry = 30 * time.Second
	// minCarried is how many beats a stream carries before it breaks for
	// the next to be opened at once.
	minCarried = 3
)

// send sends hb, on the heartbeat stream when one is open or opens, and
// returns the server's answer. A beat whose stream broke before its answer
// is sent again as a POST (a beat counts the same twice), as is one the
// server had no room for on the stream (429).
func (a *Agent) send(ctx context.Context, hb *nodusv1.NodeHeartbeat) (*nodusv1.NodeHeartbeat, error) {
	if s := a.beatStream(ctx); s != nil {
		answer, err := s.Beat(ctx, hb, streamBeatTimeout(a.currentInterval()))
		switch {
		case apierrors.IsTooManyRequests(err):
			// The server had no room for the beat on the stream, which
			// stays open: as a request it meets the server's limit, and
			// the client's retries after it, as every other request.
			a.beats.carried++
		case !errors.Is(err, heartbeatstream.ErrBroken) && !apierrors.IsServiceUnavailable(err):
			a.beats.carried++
			return answer, err
		default:
			// The stream broke, or the server shuts down (it ends the
			// stream after a 503): a request may reach another replica.
			a.streamBroke(s, err)
		}
	}
	return a.post(ctx, hb)
}

// post sends hb as a request, which waits for its answer no longer than
// requestBeatTimeout. The server bounds a beat itself (34 s), but one that
// keeps the connection alive and never answers (HTTP/2's pings still
// answered, so the transport keeps the connection) would hold every later
// beat behind this one while the node dies; kubelet bounds its heartbeat
// client by its interval for the same reason.
func (a *Agent) post(ctx context.Context, hb *nodusv1.NodeHeartbeat) (*nodusv1.NodeHeartbeat, error) {
	timeout := requestBeatTimeout(a.currentInterval())
	beat, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answer, err := a.client.NodusV1().Nodes().Heartbeat(beat, a.id.Node, hb, metav1.CreateOptions{})
	if err != nil && ctx.Err() == nil && beat.Err() != nil {
		return nil, fmt.Errorf("the server did not answer the heartbeat within %s: %w", timeout, err)
	}
	return answer, err
}

// streamBroke closes s, which broke with err, and decides when the next
// beat opens another: at once after a stream that carried a few beats,
// later after one that carried fewer (a proxy that cuts long requests), or
// none (a path that passes the opening on but not the beats).
func (a *Agent) streamBroke(s *heartbeatstream.Stream, err error) {
	s.Close()
	switch {
	case a.beats.carried == 0:
		// Opened, and not one beat answered: something between nodusd
		// and the server passed the opening's answer on but does not
		// stream (a proxy that buffers bodies).
		a.beats.retryAt = time.Now().Add(streamRefusedRetry)
		klog.InfoS("the heartbeat stream carried no beat; beating with requests", "err", err, "retryIn", streamRefusedRetry)
	case a.beats.carried < minCarried:
		a.beats.retryAt = time.Now().Add(streamFailedRetry)
		klog.InfoS("the heartbeat stream ended early; beating with requests", "err", err, "retryIn", streamFailedRetry)
	default:
		klog.V(2).InfoS("the heartbeat stream ended; sending the beat as a request", "err", err)
	}
	a.beats.open = nil // the next beat opens another
}

// beatStream is the open heartbeat stream, opening one if none is; nil
// when one was refused, or failed, lately.
func (a *Agent) beatStream(ctx context.Context) *heartbeatstream.Stream {
	if a.beats.open != nil || time.Now().Before(a.beats.retryAt) {
		return a.beats.open
	}
	s, err := heartbeatstream.Open(ctx, a.client.NodusV1().RESTClient(), a.id.Node, streamBeatTimeout(a.currentInterval()))
	if err != nil {
		retry := streamFailedRetry
		if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) || errors.Is(err, heartbeatstream.ErrNoAnswer) {
			retry = streamRefusedRetry
		}
		a.beats.retryAt = time.Now().Add(retry)
		klog.InfoS("no heartbeat stream (refused, or not answered in time); beating with requests", "err", err, "retryIn", retry)
		return nil
	}
	a.beats.open, a.beats.carried = s, 0
	return s
}

// streamBeatTimeout is how long a beat on the stream waits for its answer,
// and an opening for the server's, given the heartbeat interval: half of
// it (1 to 10 s), so that a stalled stream leaves the beat time to go as a
// request before the node is three intervals without one. A beat answers
// in milliseconds.
func streamBeatTimeout(interval time.Duration) time.Duration {
	return min(max(interval/2, time.Second), 10*time.Second)
}

// requestBeatTimeout is how long a beat sent as a request waits for its
// answer: the interval (1 to 30 s), as kubelet's heartbeat client waits.
// A beat that failed is tried again a second later (heartbeats).
func requestBeatTimeout(interval time.Duration) time.Duration {
	return min(max(interval, time.Second), 30*time.Second)
}
