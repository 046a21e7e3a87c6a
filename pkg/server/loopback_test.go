package server

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// The informers' transport must hold back the server once it has taken in
// informerStreamBuffer of a response nobody reads yet, where the client's
// default transport takes in megabytes.
func TestInformerClientBuffersLittleOfAnUnreadResponse(t *testing.T) {
	const total = 16 << 20
	var written atomic.Int64
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		chunk := make([]byte, 16<<10)
		for written.Load() < total {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			written.Add(int64(len(chunk)))
		}
	}))
	server.EnableHTTP2 = true
	server.StartTLS()
	defer server.Close()
	loopback := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw}),
	}}

	// bufferedAhead opens the response, reads none of it, and says how
	// much the server could write before the client's window held it back.
	bufferedAhead := func(cfg *rest.Config) int64 {
		t.Helper()
		written.Store(0)
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Get(server.URL)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ProtoMajor != 2 {
			t.Fatalf("the response came over %s, not HTTP/2: the test measures nothing", resp.Proto)
		}
		var last int64 = -1
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			now := written.Load()
			if now == last {
				break
			}
			last = now
		}
		// The rest still arrives once read.
		n, err := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err != nil || n != total {
			t.Fatalf("read %d of %d bytes after the pause: %v", n, total, err)
		}
		return last
	}

	ahead := bufferedAhead(loopback)
	t.Logf("the default transport: %d bytes ahead of the reader", ahead)
	if ahead < 2<<20 {
		t.Fatalf("the default transport took in only %d bytes ahead of the reader; the comparison below proves nothing", ahead)
	}
	cfg, err := informerClientConfig(loopback)
	if err != nil {
		t.Fatal(err)
	}
	ahead = bufferedAhead(cfg)
	t.Logf("the informers' transport: %d bytes ahead of the reader", ahead)
	if ahead > 2*informerStreamBuffer {
		t.Fatalf("the informers' transport took in %d bytes ahead of the reader, want at most about %d", ahead, informerStreamBuffer)
	}
}
