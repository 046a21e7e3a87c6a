package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodus-dev/nodus/pkg/answerbound"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/heartbeatstream"
	"github.com/nodus-dev/nodus/pkg/standin"
)

// TestTheServersAnswersAreBounded: nodusd read every answer of the
// server's whole, as client-go does, error answers too, and a watch for as
// long as it lasted: a server (hostile, or at fault) could have the agent
// of every host buffer an endless answer. An answer is bounded as a whole,
// a watch event by event; the heartbeat stream, which lasts as long as the
// agent beats, by its own lines (heartbeatstream), not as a whole.
func TestTheServersAnswersAreBounded(t *testing.T) {
	defer func(answer, event int64) { maxAnswerBytes, maxWatchEventBytes = answer, event }(maxAnswerBytes, maxWatchEventBytes)
	maxAnswerBytes, maxWatchEventBytes = 64<<10, 16<<10
	const endless = 64 << 20
	var written atomic.Int64
	pad := func(w http.ResponseWriter, code int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		writeEndlessly(w, ' ', endless, &written)
	}
	client, err := newClient(standin.Config(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/apis/nodus.dev/v1/nodes/n1/"+heartbeatstream.Subresource:
			// Blank lines past the answer bound, then each beat's answer.
			w.WriteHeader(http.StatusOK)
			rc := http.NewResponseController(w)
			_, _ = w.Write([]byte(strings.Repeat("\n", 256<<10)))
			_ = rc.Flush()
			beats := bufio.NewScanner(r.Body)
			for beats.Scan() {
				var hb nodusv1.NodeHeartbeat
				if err := json.Unmarshal(beats.Bytes(), &hb); err != nil {
					return
				}
				hb.APIVersion, hb.Kind = nodusv1.SchemeGroupVersion.String(), "NodeHeartbeat"
				answer, _ := json.Marshal(&hb)
				if _, err := w.Write(append(answer, '\n')); err != nil || rc.Flush() != nil {
					return
				}
			}
		case r.URL.Query().Get("watch") == "true":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"type":"ADDED","object":{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"name":"e","namespace":"p","resourceVersion":"2"}}}`)
			_, _ = io.WriteString(w, `{"type":"ADDED","object":{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"name":"endless","namespace":"p"`)
			pad(w, http.StatusOK)
		case r.URL.Query().Get("fail") == "true":
			pad(w, http.StatusInternalServerError)
		case strings.HasPrefix(r.URL.Path, "/apis/nodus.dev/v1/executions"):
			pad(w, http.StatusOK)
		default:
			http.NotFound(w, r)
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	executions := client.NodusV1().Executions("")
	var tooLarge *answerbound.TooLargeError
	_, err = executions.List(ctx, metav1.ListOptions{})
	if !errors.As(err, &tooLarge) || tooLarge.Of != answerbound.AnAnswer {
		t.Errorf("an endless list: %v", err)
	}
	if n := written.Swap(0); n >= endless/4 {
		t.Errorf("the agent read %d MiB of an endless list", n>>20)
	}
	err = client.NodusV1().RESTClient().Get().AbsPath("/apis/nodus.dev/v1/executions").Param("fail", "true").Do(ctx).Error()
	if !errors.As(err, &tooLarge) {
		t.Errorf("an endless error answer: %.300v", err)
	}
	if n := written.Swap(0); n >= endless/4 {
		t.Errorf("the agent read %d MiB of an endless error answer", n>>20)
	}

	w, err := executions.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var events []watch.Event
	for e := range w.ResultChan() {
		if events = append(events, e); len(events) == 2 {
			w.Stop()
		}
	}
	if len(events) != 2 || events[0].Type != watch.Added || events[1].Type != watch.Error {
		t.Fatalf("a watch whose second event is endless: %d events", len(events))
	}
	if st, ok := events[1].Object.(*metav1.Status); !ok || !strings.Contains(st.Message, answerbound.WatchEventTooLargeText) {
		t.Errorf("a watch whose second event is endless ended with %#v", events[1].Object)
	}
	if n := written.Swap(0); n >= endless/4 {
		t.Errorf("the agent read %d MiB of an endless watch event", n>>20)
	}

	s, err := heartbeatstream.Open(ctx, client.NodusV1().RESTClient(), "n1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 {
		hb := &nodusv1.NodeHeartbeat{AgentGeneration: int64(i + 1)}
		if got, err := s.Beat(ctx, hb, 10*time.Second); err != nil || got.AgentGeneration != hb.AgentGeneration {
			t.Errorf("beat %d on a stream past the answer bound: %v, %v", i+1, got, err)
		}
	}
}
