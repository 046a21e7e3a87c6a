package loopback

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, ctx context.Context, method, url string, body io.Reader) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer loopback-token")
	return (&http.Client{Transport: &Transport{Handler: h}}).Do(req)
}

// The handler sees the request as the server would have read it off the
// wire, and the client gets the handler's answer whole.
func TestARequestReachesTheHandlerAsOverTheNetwork(t *testing.T) {
	var seen *http.Request
	var body string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Answer", "yes")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"kind":"Node"}`))
	})
	resp, err := get(t, h, context.Background(), http.MethodPost, "https://127.0.0.1:6443/apis/nodus.dev/v1/nodes?dryRun=All", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Answer") != "yes" || string(got) != `{"kind":"Node"}` {
		t.Fatalf("answer: %d %v %q", resp.StatusCode, resp.Header, got)
	}
	switch {
	case seen.URL.Host != "" || seen.URL.Scheme != "":
		t.Errorf("the handler's URL has a host or scheme: %v", seen.URL)
	case seen.URL.Path != "/apis/nodus.dev/v1/nodes" || seen.URL.RawQuery != "dryRun=All":
		t.Errorf("URL %v", seen.URL)
	case seen.RequestURI != "/apis/nodus.dev/v1/nodes?dryRun=All":
		t.Errorf("RequestURI %q", seen.RequestURI)
	case seen.RemoteAddr != RemoteAddr:
		t.Errorf("RemoteAddr %q", seen.RemoteAddr)
	case seen.Host != "127.0.0.1:6443":
		t.Errorf("Host %q", seen.Host)
	case seen.ProtoMajor != 2:
		t.Errorf("proto %q", seen.Proto)
	case seen.Header.Get("Authorization") != "Bearer loopback-token":
		t.Errorf("the credential did not reach the handler: %v", seen.Header)
	case body != `{"a":1}`:
		t.Errorf("request body %q", body)
	}
}

// A handler that writes nothing answers 200 with an empty body, and one
// that answers 204 or a HEAD cannot send a body, as over net/http.
func TestAnswersWithoutABody(t *testing.T) {
	silent := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	resp, err := get(t, silent, context.Background(), http.MethodGet, "https://x/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(got) != 0 {
		t.Fatalf("silent handler: %d %q", resp.StatusCode, got)
	}
	writeErr := make(chan error, 1)
	noContent := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		_, err := w.Write([]byte("x"))
		writeErr <- err
	})
	resp, err = get(t, noContent, context.Background(), http.MethodDelete, "https://x/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || len(got) != 0 || !errors.Is(<-writeErr, http.ErrBodyNotAllowed) {
		t.Fatalf("204: %d %q", resp.StatusCode, got)
	}
}

// A watch streams: the client reads each event as the handler flushes it,
// while the handler is still running.
func TestAWatchStreams(t *testing.T) {
	next := make(chan string)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for event := range next {
			_, _ = w.Write([]byte(event + "\n"))
			w.(http.Flusher).Flush()
		}
	})
	resp, err := get(t, h, context.Background(), http.MethodGet, "https://x/apis/nodus.dev/v1/nodes?watch=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	for _, event := range []string{"ADDED", "MODIFIED", "DELETED"} {
		next <- event
		line, err := lines.ReadString('\n')
		if err != nil || line != event+"\n" {
			t.Fatalf("read %q, %v; want %q", line, err, event)
		}
	}
	close(next)
	if rest, err := io.ReadAll(lines); err != nil || len(rest) != 0 {
		t.Fatalf("after the handler returned: %q, %v", rest, err)
	}
}

// A client that closes the body (a watch it stops) ends the handler's
// context and fails its writes, so the handler's goroutine does not stay
// blocked on a reader that is gone.
func TestClosingTheBodyReleasesTheHandler(t *testing.T) {
	ended := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for {
			if _, err := w.Write([]byte("event\n")); err != nil {
				<-r.Context().Done()
				ended <- err
				return
			}
		}
	})
	resp, err := get(t, h, context.Background(), http.MethodGet, "https://x/watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 12)); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, errClosed) {
			t.Fatalf("the handler's write failed with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still writes 10 s after the client closed the body")
	}
}

// A handler that panics does not take the process down. Before its header
// the client gets an error; after it, a body that fails, never one that
// looks complete.
func TestAPanicIsAnErrorNotATruncatedAnswer(t *testing.T) {
	before := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("before the header") })
	if resp, err := get(t, before, context.Background(), http.MethodGet, "https://x/a", nil); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("a panic before the header answered %d", resp.StatusCode)
	}
	after := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte(`{"kind":`))
		panic(http.ErrAbortHandler)
	})
	resp, err := get(t, after, context.Background(), http.MethodGet, "https://x/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !errors.Is(err, errAborted) {
		t.Fatalf("an aborted answer read as %q, %v", got, err)
	}
}

// A client that gives up before the answer gets its context's error at
// once, and the handler's context ends with it.
func TestACancelledRequestEndsTheHandlersContext(t *testing.T) {
	handlerDone := make(chan struct{})
	started := make(chan struct{})
	h := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		close(handlerDone)
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	if resp, err := get(t, h, ctx, http.MethodGet, "https://x/a", nil); !errors.Is(err, context.Canceled) {
		if err == nil {
			_ = resp.Body.Close()
		}
		t.Fatalf("a cancelled request returned %v", err)
	}
	select {
	case <-handlerDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end with the client's")
	}
}

// The request body is closed once the handler returns, as net/http's server
// does, so a client's body is never left open.
func TestTheRequestBodyIsClosed(t *testing.T) {
	body := &closeRecorder{Reader: strings.NewReader("{}"), closed: make(chan struct{})}
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	resp, err := get(t, h, context.Background(), http.MethodPut, "https://x/a", body)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	select {
	case <-body.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the request body was not closed")
	}
}

type closeRecorder struct {
	io.Reader
	closed chan struct{}
}

func (c *closeRecorder) Close() error { close(c.closed); return nil }

// The request's context ends once the handler returns, as net/http's does,
// even for a client that reads the answer and never closes the body.
func TestTheRequestsContextEndsWithTheHandler(t *testing.T) {
	contexts := make(chan context.Context, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		contexts <- r.Context()
		_, _ = w.Write([]byte("done"))
	})
	resp, err := get(t, h, context.Background(), http.MethodGet, "https://x/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(resp.Body); err != nil || string(got) != "done" {
		t.Fatalf("answer %q, %v", got, err)
	}
	select {
	case <-(<-contexts).Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the request's context outlived its handler")
	}
}
