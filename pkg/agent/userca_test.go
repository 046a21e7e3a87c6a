package agent

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nodus-dev/nodus/pkg/standin"
)

// TestTheServersUserCAIsReadWithinItsBound: nodusd read the server's SSH
// user CA whole before it checked that it was one key (at most 8 KiB), so
// a server (or something between) that answered without end had the
// agent, as root, buffer it into the host's memory.
func TestTheServersUserCAIsReadWithinItsBound(t *testing.T) {
	const answer = 256 << 20
	var written atomic.Int64
	var status atomic.Int32
	status.Store(http.StatusOK)
	clients := standin.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ssh-user-ca.pub" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
		writeEndlessly(w, 'A', answer, &written)
	}))
	a := &Agent{client: clients}
	path := filepath.Join(t.TempDir(), "ca.pub")
	err := a.installUserCA(context.Background(), path)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an endless SSH user CA: %v", err)
	}
	if n := written.Load(); n >= answer/4 {
		t.Errorf("the agent read %d MiB of an SSH user CA before refusing it", n>>20)
	}
	// An error's answer too.
	status.Store(http.StatusInternalServerError)
	written.Store(0)
	if err := a.installUserCA(context.Background(), path); err == nil || !strings.Contains(err.Error(), "answered 500") {
		t.Errorf("an endless error for the SSH user CA: %.300v", err)
	}
	if n := written.Load(); n >= answer/4 {
		t.Errorf("the agent read %d MiB of an error answer for the SSH user CA", n>>20)
	}
}

// writeEndlessly writes size bytes of c to w, as a server that answers
// without end would, adding what went out to written; it stops when the
// client stops reading.
func writeEndlessly(w http.ResponseWriter, c byte, size int, written *atomic.Int64) {
	chunk := bytes.Repeat([]byte{c}, 64<<10)
	for range size / len(chunk) {
		n, err := w.Write(chunk)
		written.Add(int64(n))
		if err != nil {
			return
		}
	}
}
