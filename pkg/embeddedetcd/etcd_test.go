package embeddedetcd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClientPortServesGRPCAlone: the client port answers gRPC, and etcd's
// HTTP endpoints are on a port of their own; a data dir whose ports.json
// predates that port keeps its client and peer ports and gains one.
func TestClientPortServesGRPCAlone(t *testing.T) {
	dir := t.TempDir()
	old := ports{Client: pickPort(t), Peer: pickPort(t)}
	data, _ := json.Marshal(old)
	if err := os.WriteFile(filepath.Join(dir, "ports.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Start(dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())

	var p ports
	data, err = os.ReadFile(filepath.Join(dir, "ports.json"))
	if err != nil || json.Unmarshal(data, &p) != nil {
		t.Fatalf("ports.json after the start: %s %v", data, err)
	}
	if p.Client != old.Client || p.Peer != old.Peer || p.HTTP == 0 || p.HTTP == p.Client || p.HTTP == p.Peer {
		t.Fatalf("ports %+v after a start on %+v: want the same client and peer ports and an HTTP port of its own", p, old)
	}
	if want := fmt.Sprintf("https://127.0.0.1:%d", old.Client); s.ClientURL != want {
		t.Errorf("client URL %s, want %s", s.ClientURL, want)
	}

	cfg, err := ClientConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("gRPC on the client port: %v", err)
	}

	tlsConfig, err := s.TLS.Config()
	if err != nil {
		t.Fatal(err)
	}
	web := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 10 * time.Second}
	defer web.CloseIdleConnections()
	resp, err := web.Get(fmt.Sprintf("https://127.0.0.1:%d/health", p.HTTP))
	if err != nil {
		t.Fatalf("/health on the HTTP port: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health on the HTTP port: %s", resp.Status)
	}
	if resp, err := web.Get(s.ClientURL + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("the client port answered HTTP: %s", resp.Status)
	}
}

func pickPort(t *testing.T) int {
	t.Helper()
	p, err := loadOrPickPorts(filepath.Join(t.TempDir(), "ports.json"))
	if err != nil {
		t.Fatal(err)
	}
	return p.Client
}
