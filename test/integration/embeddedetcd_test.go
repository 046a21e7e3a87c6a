package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestEmbeddedEtcdOpensOnlyToTheServer: the embedded etcd listens on
// loopback, where any local user can connect; it answers only a client
// with the certificate of its own CA, which only the server's user can
// read. No plain HTTP, no anonymous TLS, no certificate of the API's CA
// (an operator's or an agent's) gets in: not on the client port (gRPC),
// not on the port of etcd's HTTP endpoints, not on the peer port.
func TestEmbeddedEtcdOpensOnlyToTheServer(t *testing.T) {
	s := testserver.StartTestServer(t)
	dir := filepath.Join(s.DataDir, "etcd")
	data, err := os.ReadFile(filepath.Join(dir, "ports.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ports struct{ Client, Peer, HTTP int }
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
	if ports.HTTP == 0 {
		t.Fatalf("ports.json has no HTTP port: %s", data)
	}
	for _, port := range []int{ports.HTTP, ports.Peer} {
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
	if code, err := get(fmt.Sprintf("https://127.0.0.1:%d/version", ports.HTTP), pair(filepath.Join(dir, "pki", "client"))); err != nil || code != 200 {
		t.Errorf("the server's own etcd credential on the HTTP port: %d %v", code, err)
	}
	// The client port speaks gRPC only: ask it as etcd's own client does.
	read := func(tlsConfig *tls.Config) error {
		client, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("https://127.0.0.1:%d", ports.Client)},
			TLS: tlsConfig, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = client.Get(ctx, "/registry", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	}
	if err := read(&tls.Config{RootCAs: etcdCA}); err == nil {
		t.Error("the client port answers gRPC over TLS without a client certificate")
	}
	if err := read(&tls.Config{RootCAs: etcdCA, Certificates: pair(filepath.Join(s.DataDir, "pki", "admin"))}); err == nil {
		t.Error("the client port answers gRPC with the API's operator certificate")
	}
	if err := read(&tls.Config{RootCAs: etcdCA, Certificates: pair(filepath.Join(dir, "pki", "client"))}); err != nil {
		t.Errorf("the server's own etcd credential on the client port: %v", err)
	}
	for name, want := range map[string]os.FileMode{"pki": 0o700, "pki/ca.key": 0o600, "pki/client.key": 0o600, "pki/server.key": 0o600, "pki/peer.key": 0o600} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %o", name, err, info, want)
		}
	}
}

// TestEmbeddedStoresListFromTheWatchCache: the stores of a server on
// embedded etcd call the member in process, and a consistent LIST is still
// served from the watch cache (after etcd's current revision), not from etcd
// with every object decoded. The library serves it from the cache only once
// it knows etcd's version, which it asks each endpoint of a client for; an
// in-process client has none of its own.
func TestEmbeddedStoresListFromTheWatchCache(t *testing.T) {
	s := testserver.StartTestServer(t)
	ctx := context.Background()
	for _, name := range []string{"cache-a", "cache-b"} {
		if _, err := s.Client.NodusV1().Projects().Create(ctx, &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const served = `apiserver_watch_cache_consistent_read_total{fallback="false",group="nodus.dev",resource="projects",success="true"} `
	before := metricValue(t, s, served)
	list, err := s.Client.NodusV1().Projects().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) < 2 {
		t.Fatalf("listed %d projects, want the 2 created", len(list.Items))
	}
	if after := metricValue(t, s, served); after != before+1 {
		t.Fatalf("the LIST was not served from the watch cache: %s went from %d to %d", served, before, after)
	}
}

// metricValue reads the counter of the line that starts with prefix from
// the server's /metrics; 0 when there is none.
func metricValue(t *testing.T, s *testserver.Server, prefix string) int {
	t.Helper()
	v, _ := metricFloat(t, s, prefix)
	return int(v)
}

// metricFloat reads the value of the first line that starts with prefix
// from the server's /metrics, and whether there is one.
func metricFloat(t *testing.T, s *testserver.Server, prefix string) (float64, bool) {
	t.Helper()
	r := do(t, s.Config, "GET", "/metrics", "", nil)
	if r.code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", r.code, r.body)
	}
	for _, line := range strings.Split(string(r.body), "\n") {
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v, true
		}
	}
	return 0, false
}
