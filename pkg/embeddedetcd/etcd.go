// Package embeddedetcd runs a single-member etcd inside nodus-server, so the
// default installation needs no separate database.
package embeddedetcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running embedded etcd.
type Server struct {
	etcd *embed.Etcd
	// ClientURL is where the API server reaches etcd.
	ClientURL string
}

// ports remembers the loopback ports of the member, because etcd records its
// peer URL in its data and must find it again on the next start.
type ports struct {
	Client int `json:"client"`
	Peer   int `json:"peer"`
}

// Start starts etcd with its data under dir and waits until it serves, or
// until timeout passes.
func Start(dir string, timeout time.Duration) (*Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p, err := loadOrPickPorts(filepath.Join(dir, "ports.json"))
	if err != nil {
		return nil, err
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", p.Client)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", p.Peer)}

	cfg := embed.NewConfig()
	cfg.Name = "nodus"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Heartbeats are cheap writes; keep the history compacted so that the
	// database does not grow with them.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
	cfg.QuotaBackendBytes = 8 << 30

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
	return &Server{etcd: e, ClientURL: clientURL.String()}, nil
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
	if err == nil {
		if err := json.Unmarshal(data, &p); err != nil {
			return p, fmt.Errorf("%s is corrupt: %w", path, err)
		}
		return p, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return p, err
	}
	if p.Client, err = freePort(); err != nil {
		return p, err
	}
	if p.Peer, err = freePort(); err != nil {
		return p, err
	}
	data, _ = json.Marshal(p)
	return p, os.WriteFile(path, data, 0o600)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
