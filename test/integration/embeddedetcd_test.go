package integration

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestEmbeddedEtcdOpensOnlyToTheServer: the embedded etcd listens on
// loopback, where any local user can connect; it answers only a client
// with the certificate of its own CA, which only the server's user can
// read. No plain HTTP, no anonymous TLS, no certificate of the API's CA
// (an operator's or an agent's) gets in, on the client or the peer port.
func TestEmbeddedEtcdOpensOnlyToTheServer(t *testing.T) {
	s := testserver.StartTestServer(t)
	dir := filepath.Join(s.DataDir, "etcd")
	data, err := os.ReadFile(filepath.Join(dir, "ports.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ports struct{ Client, Peer int }
	if err := json.Unmarshal(data, &ports); err != nil {
		t.Fatal(err)
	}
	etcdCA := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if err != nil || !etcdCA.AppendCertsFromPEM(caPEM) {
		t.Fatalf("the embedded etcd's CA: %v", err)
	}
	pair := func(base string) []tls.Certificate {
		c, err := tls.LoadX509KeyPair(base+".crt", base+".key")
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	get := func(url string, certs []tls.Certificate) (int, error) {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: etcdCA, Certificates: certs}}}
		resp, err := client.Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, port := range []int{ports.Client, ports.Peer} {
		version := fmt.Sprintf("https://127.0.0.1:%d/version", port)
		if code, err := get(fmt.Sprintf("http://127.0.0.1:%d/version", port), nil); err == nil && code == 200 {
			t.Errorf("port %d answers plain HTTP", port)
		}
		if code, err := get(version, nil); err == nil {
			t.Errorf("port %d answers TLS without a client certificate: %d", port, code)
		}
		if code, err := get(version, pair(filepath.Join(s.DataDir, "pki", "admin"))); err == nil {
			t.Errorf("port %d answers the API's operator certificate: %d", port, code)
		}
	}
	if code, err := get(fmt.Sprintf("https://127.0.0.1:%d/version", ports.Client), pair(filepath.Join(dir, "pki", "client"))); err != nil || code != 200 {
		t.Errorf("the server's own etcd credential: %d %v", code, err)
	}
	for name, want := range map[string]os.FileMode{"pki": 0o700, "pki/ca.key": 0o600, "pki/client.key": 0o600, "pki/server.key": 0o600, "pki/peer.key": 0o600} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %o", name, err, info, want)
		}
	}
}
