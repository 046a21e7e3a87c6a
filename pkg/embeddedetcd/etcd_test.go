package embeddedetcd

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nodus-dev/nodus/pkg/pki"
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

// TestAMemberOutlivesItsCertificates: the member's client certificate was
// issued for a year and never again: a year on, the server could not
// reach its own etcd, started or running. Near their end, the member's
// certificates are issued anew at a start, and by RenewCertificates while
// it runs, which etcd and its clients take at their next handshake.
func TestAMemberOutlivesItsCertificates(t *testing.T) {
	dir := t.TempDir()
	s, err := Start(dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.Stop(context.Background())
	pkiDir := filepath.Join(dir, "pki")
	replant(t, pkiDir, "client", -time.Hour)
	replant(t, pkiDir, "server", 10*24*time.Hour)

	if s, err = Start(dir, time.Minute); err != nil {
		t.Fatalf("a start with an expired client certificate: %v", err)
	}
	defer s.Stop(context.Background())
	if err := put(dir); err != nil {
		t.Fatalf("a client of the member restarted with an expired client certificate: %v", err)
	}
	if left := servedFor(t, s); left < 300*24*time.Hour {
		t.Errorf("the member restarted serves a certificate that ends in %s", left)
	}

	// Running: the certificates near their end, as a year later.
	replant(t, pkiDir, "client", -time.Hour)
	replant(t, pkiDir, "server", 10*24*time.Hour)
	if err := put(dir); err == nil {
		t.Fatal("an expired client certificate was taken: the test shows nothing")
	}
	renewed, err := s.RenewCertificates()
	if err != nil || len(renewed) != 2 {
		t.Fatalf("RenewCertificates wrote %v (%v), want the client and server certificates", renewed, err)
	}
	if err := put(dir); err != nil {
		t.Errorf("a client after RenewCertificates: %v", err)
	}
	if left := servedFor(t, s); left < 300*24*time.Hour {
		t.Errorf("after RenewCertificates, the member serves a certificate that ends in %s", left)
	}
	if renewed, err := s.RenewCertificates(); err != nil || len(renewed) != 0 {
		t.Errorf("RenewCertificates of lasting certificates wrote %v (%v)", renewed, err)
	}
}

// replant signs the member's certificate name again, with the same key,
// to end left from now.
func replant(t *testing.T, pkiDir, name string, left time.Duration) {
	t.Helper()
	ca, err := pki.LoadCA(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(pkiDir, name+".crt")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cert.NotBefore, cert.NotAfter = time.Now().Add(-400*24*time.Hour), time.Now().Add(left)
	der, err := x509.CreateCertificate(rand.Reader, cert, ca.Cert, cert.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// put writes a key through a new client of the member in dir.
func put(dir string) error {
	cfg, err := ClientConfig(dir)
	if err != nil {
		return err
	}
	cfg.DialTimeout = 5 * time.Second
	client, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = client.Put(ctx, "k", "v")
	return err
}

// servedFor is how long the certificate the member serves now lasts.
func servedFor(t *testing.T, s *Server) time.Duration {
	t.Helper()
	cfg, err := s.TLS.Config()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(s.ClientURL, "https://"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return time.Until(conn.ConnectionState().PeerCertificates[0].NotAfter)
}
