// Package embeddedetcd runs a single-member etcd inside nodus-server, so the
// default installation needs no separate database.
//
// The member listens on loopback only, and speaks TLS there with client
// certificates of a CA of its own (DIR/pki, 0700, keys 0600): another local
// user of the machine can neither read nor write the store, and no
// certificate of the API's CA — an agent's, a person's — opens it.
package embeddedetcd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/freeport"
	"github.com/nodus-dev/nodus/pkg/pki"
)

// Server is a running embedded etcd.
type Server struct {
	etcd *embed.Etcd
	// quota is the backend's size past which etcd refuses writes.
	quota int64
	// ClientURL is where the API server reaches etcd.
	ClientURL string
	// TLS is the client credential ClientURL asks for; nil for a member
	// started by StartInsecure.
	TLS *ClientTLS
}

// ClientTLS are the files of a client credential of the member.
type ClientTLS struct {
	CertFile, KeyFile, CAFile string
}

// Config is the TLS client configuration of c.
func (c *ClientTLS) Config() (*tls.Config, error) {
	return transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.CAFile}.ClientConfig()
}

// ports remembers the loopback ports of the member, because etcd records its
// peer URL in its data and must find it again on the next start.
type ports struct {
	Client int `json:"client"`
	Peer   int `json:"peer"`
	// HTTP serves etcd's HTTP endpoints (/health, /metrics), so that the
	// client port serves gRPC alone; data dirs from before it have none
	// until the next start picks one.
	HTTP int `json:"http,omitempty"`
}

// DefaultQuotaBytes is the database size past which the member refuses
// writes, etcd's recommended largest.
const DefaultQuotaBytes = 8 << 30

// Start starts etcd with its data under dir, serving TLS with client
// certificates, and waits until it serves, or until timeout passes.
func Start(dir string, timeout time.Duration) (*Server, error) {
	return start(dir, timeout, true, DefaultQuotaBytes)
}

// StartWithQuota is Start with a database quota of quotaBytes.
func StartWithQuota(dir string, timeout time.Duration, quotaBytes int64) (*Server, error) {
	return start(dir, timeout, true, quotaBytes)
}

// StartInsecure starts a member that serves plain HTTP on loopback, for
// tests and benchmarks that stand it in for an external cluster.
func StartInsecure(dir string, timeout time.Duration) (*Server, error) {
	return start(dir, timeout, false, DefaultQuotaBytes)
}

func start(dir string, timeout time.Duration, secure bool, quotaBytes int64) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p, err := loadOrPickPorts(filepath.Join(dir, "ports.json"))
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	clientURL := url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", p.Client)}
	peerURL := url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", p.Peer)}
	httpURL := url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", p.HTTP)}

	cfg := embed.NewConfig()
	cfg.Name = "nodus"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	// With HTTP on a port of its own, etcd serves the client port with
	// gRPC's own server. Sharing one TLS port, etcd hands every gRPC call
	// to gRPC through net/http's HTTP/2 server (grpc.Server.ServeHTTP),
	// which cost the API server's every storage call more CPU
	// (docs/performance.md, "The embedded etcd's gRPC").
	cfg.ListenClientHttpUrls = []url.URL{httpURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Heartbeats are cheap writes; keep the history compacted so that the
	// database does not grow with them.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
	cfg.QuotaBackendBytes = quotaBytes
	// The embedded etcd is a single member: no follower ever needs the raft
	// entries etcd keeps in memory for catching up (5,000 by default), and
	// a restart replays every entry since the last snapshot (up to 10,000)
	// into memory. Fewer of both made a restarted server with 10,000
	// reserved nodes 26-59 MB smaller in nodus-bench's memory scenario;
	// crud's UPDATE rate did not change beyond the noise between runs.
	cfg.SnapshotCount = 2000
	cfg.SnapshotCatchUpEntries = 500
	// A single member elects itself once its randomized election timeout
	// has run out, after a restart too: with etcd's 100 ms ticks that took
	// 0.3-1.0 s of each start (nodus-server's whole restart to ready at
	// 10,000 reserved nodes took 1.1-2.4 s). Heartbeat ticks have no follower
	// to reach here, so they can be short: etcd's own floor is an election
	// timeout of five ticks. Its lease TTL floor (1.5 election timeouts)
	// falls to 150 ms, below any TTL Nodus asks for.
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	var client *ClientTLS
	if secure {
		if client, err = secureMember(cfg, filepath.Join(dir, "pki")); err != nil {
			return nil, fmt.Errorf("embedded etcd's certificates in %s: %w", dir, err)
		}
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s was not ready within %s", dir, timeout)
	}
	return &Server{etcd: e, quota: quotaBytes, ClientURL: clientURL.String(), TLS: client}, nil
}

// secureMember makes cfg serve clients and peers only over TLS with client
// certificates of the member's own CA in dir, and returns the client
// credential (created on first use).
func secureMember(cfg *embed.Config, dir string) (*ClientTLS, error) {
	files, err := memberCertificates(dir)
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: files.serverCert, KeyFile: files.serverKey, TrustedCAFile: caFile, ClientCertAuth: true}
	cfg.PeerTLSInfo = transport.TLSInfo{CertFile: files.peerCert, KeyFile: files.peerKey, TrustedCAFile: caFile, ClientCertAuth: true}
	return clientCredential(dir), nil
}

type memberFiles struct{ serverCert, serverKey, peerCert, peerKey string }

// memberCertificates loads the member's CA in dir and its serving, peer
// and client certificates, issuing each that is missing or near its end.
func memberCertificates(dir string) (memberFiles, error) {
	var f memberFiles
	ca, err := pki.LoadOrCreateCA(dir, "nodus-embedded-etcd")
	if err != nil {
		return f, err
	}
	hosts := []string{"127.0.0.1", "localhost"}
	if f.serverCert, f.serverKey, err = ca.LoadOrCreateServing(dir, "server", hosts); err != nil {
		return f, err
	}
	if f.peerCert, f.peerKey, err = ca.LoadOrCreatePeer(dir, "peer", hosts); err != nil {
		return f, err
	}
	_, err = ca.LoadOrCreateClient(dir, "client", "nodus-server", nil)
	return f, err
}

// RenewCertificates issues the member's certificates anew where they near
// their end, for a server that runs longer than they last: etcd reads its
// serving and peer files at each handshake, and its clients (the API
// server's too) read theirs at each connection. It returns the files it
// wrote.
func (s *Server) RenewCertificates() ([]string, error) {
	if s.TLS == nil {
		return nil, nil
	}
	dir := filepath.Dir(s.TLS.CertFile)
	files := []string{filepath.Join(dir, "server.crt"), filepath.Join(dir, "peer.crt"), filepath.Join(dir, "client.crt")}
	before := make([][]byte, len(files))
	for i, f := range files {
		before[i], _ = os.ReadFile(f)
	}
	if _, err := memberCertificates(dir); err != nil {
		return nil, err
	}
	var renewed []string
	for i, f := range files {
		if after, _ := os.ReadFile(f); !bytes.Equal(after, before[i]) {
			renewed = append(renewed, f)
		}
	}
	return renewed, nil
}

func clientCredential(pkiDir string) *ClientTLS {
	return &ClientTLS{CertFile: filepath.Join(pkiDir, "client.crt"), KeyFile: filepath.Join(pkiDir, "client.key"), CAFile: filepath.Join(pkiDir, "ca.crt")}
}

// ClientConfig is how tools and tests on the same machine reach the member
// whose data is in dir (as root, or as the user the server runs as).
func ClientConfig(dir string) (clientv3.Config, error) {
	data, err := os.ReadFile(filepath.Join(dir, "ports.json"))
	if err != nil {
		return clientv3.Config{}, err
	}
	var p ports
	if err := json.Unmarshal(data, &p); err != nil {
		return clientv3.Config{}, err
	}
	cfg := clientv3.Config{DialTimeout: 10 * time.Second, Logger: zap.NewNop()}
	credential := clientCredential(filepath.Join(dir, "pki"))
	if _, err := os.Stat(credential.CertFile); errors.Is(err, os.ErrNotExist) {
		cfg.Endpoints = []string{fmt.Sprintf("http://127.0.0.1:%d", p.Client)}
		return cfg, nil
	}
	if cfg.TLS, err = credential.Config(); err != nil {
		return clientv3.Config{}, err
	}
	cfg.Endpoints = []string{fmt.Sprintf("https://127.0.0.1:%d", p.Client)}
	return cfg, nil
}

// Stop stops etcd; call it after the API server has stopped using it.
func (s *Server) Stop(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.etcd.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func loadOrPickPorts(path string) (ports, error) {
	var p ports
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &p); err != nil {
			return p, fmt.Errorf("%s is corrupt: %w", path, err)
		}
		if p.HTTP != 0 {
			return p, nil
		}
	case !errors.Is(err, os.ErrNotExist):
		return p, err
	}
	// The ports are kept for every later start, so they come from below
	// the ephemeral range, where no outgoing connection of this machine can
	// hold one when the server starts again. Picked together, they differ
	// from each other, and from a port kept from before.
	picked, err := freeport.PickN(6)
	if err != nil {
		return p, err
	}
	for _, port := range []*int{&p.Client, &p.Peer, &p.HTTP} {
		for *port == 0 {
			if next := picked[0]; next != p.Client && next != p.Peer && next != p.HTTP {
				*port = next
			}
			picked = picked[1:]
		}
	}
	data, _ = json.Marshal(p)
	return p, atomicfile.Write(path, data, 0o600)
}
