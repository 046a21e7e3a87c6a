package server

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
)

// TestTheEtcdClientGivesUpAMemberThatHangs: one of the client's endpoints
// stops answering without closing its connection (a member stopped with
// SIGSTOP, powered off, or cut off by a firewall that drops). The client
// round-robins its calls over its connections; without keep-alive pings it
// never learns that one is dead, and every call sent there waits for its
// deadline. With them it gives the connection up and serves every call
// from the member that answers. Here the hanging one is a TCP proxy to the
// same member that stops forwarding.
func TestTheEtcdClientGivesUpAMemberThatHangs(t *testing.T) {
	// gRPC pings every 10 s at the most (it raises a shorter time to that).
	etcdKeepAliveTime, etcdKeepAliveTimeout = 10*time.Second, time.Second
	t.Cleanup(func() { etcdKeepAliveTime, etcdKeepAliveTimeout = 30*time.Second, 10*time.Second })
	member, err := embeddedetcd.StartInsecure(t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Stop(context.Background())
	direct, err := url.Parse(member.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	hang := hangingProxy(t, direct.Host)
	client, err := newEtcdClient([]string{"http://" + hang.addr, member.ClientURL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// A value larger than every frame the client sends unasked (pings,
	// settings, window updates): what the proxy forwards tells a call.
	value := strings.Repeat("v", 2<<10)
	put := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := client.Put(ctx, "k", value)
		return err
	}
	// Both connections up and used: a call went through the proxy. Under
	// load its connection may come up after the first calls, which round
	// robin then sends to the member alone (CI once saw every call go
	// there, and the test tested nothing).
	throughProxy := false
	for i := 0; !throughProxy; i++ {
		if i == 200 {
			t.Fatal("no call went through the proxy's connection before the hang")
		}
		before := hang.forwarded.Load()
		if err := put(); err != nil {
			t.Fatalf("put %d before the hang: %v", i, err)
		}
		throughProxy = hang.forwarded.Load()-before >= int64(len(value))
	}
	hang.hanging.Store(true)
	deadline := time.Now().Add(30 * time.Second)
	failed := 0
	for i := 0; time.Now().Before(deadline); i++ {
		if put() != nil {
			failed++
			continue
		}
		if failed > 0 && i >= failed+10 {
			break
		}
	}
	if failed == 0 {
		t.Fatal("no call went to the member that hangs: the test tested nothing")
	}
	// The calls sent to the hanging connection before the pings gave it
	// up fail; after that, none.
	for i := range 20 {
		if err := put(); err != nil {
			t.Fatalf("put %d after the client had 30 s to learn of the hang: %v (it still sends calls to the member that hangs)", i, err)
		}
	}
	t.Logf("%d calls failed while the client learnt that a member hangs", failed)
}

// proxy forwards TCP connections to an address until hanging is set; then
// it forwards nothing more, and closes nothing, as a hung host does.
type proxy struct {
	addr    string
	hanging atomic.Bool
	// forwarded counts the bytes forwarded from the client.
	forwarded atomic.Int64
}

func hangingProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: l.Addr().String()}
	var conns sync.WaitGroup
	t.Cleanup(func() { l.Close(); conns.Wait() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", upstream)
			if err != nil {
				in.Close()
				continue
			}
			conns.Add(2)
			pipe := func(from, to net.Conn) {
				defer conns.Done()
				defer from.Close()
				defer to.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := from.Read(buf)
					if n > 0 && !p.hanging.Load() {
						if _, err := to.Write(buf[:n]); err != nil {
							return
						}
						if from == in {
							p.forwarded.Add(int64(n))
						}
					}
					if err != nil {
						return
					}
				}
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
	return p
}
