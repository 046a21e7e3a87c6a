package integration

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/clusteridentity"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// externalEtcd is an etcd member outside the servers, serving TLS that
// asks for client certificates, as an operator's cluster would; its
// client credential goes to nodus-server by --etcd-cafile, --etcd-certfile
// and --etcd-keyfile.
func externalEtcd(t *testing.T) *embeddedetcd.Server {
	t.Helper()
	etcd, err := embeddedetcd.Start(t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Stop(ctx(t)) })
	return etcd
}

// onCluster points a replica at etcd with the cluster key in keyFile.
func onCluster(etcd *embeddedetcd.Server, keyFile string) func(*server.Options) {
	return func(o *server.Options) {
		o.EtcdServers = []string{etcd.ClientURL}
		o.EtcdCAFile, o.EtcdCertFile, o.EtcdKeyFile = etcd.TLS.CAFile, etcd.TLS.CertFile, etcd.TLS.KeyFile
		o.ClusterKeyFile = keyFile
	}
}

func clusterKeyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.key")
	if _, err := clusteridentity.EnsureKeyFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReplicasAreOneCluster runs two replicas on one external etcd over
// TLS with one cluster key: they share objects and watches, and every
// credential one issues works through the other.
func TestReplicasAreOneCluster(t *testing.T) {
	testserver.KeepLogs(t)
	etcd := externalEtcd(t)
	key := clusterKeyFile(t)
	var replicas []*testserver.Server
	for i := 0; i < 2; i++ {
		s, err := testserver.Start(t.TempDir(), nil, onCluster(etcd, key))
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		t.Cleanup(s.Stop)
		replicas = append(replicas, s)
	}
	a, b := replicas[0], replicas[1]

	w, err := b.Client.NodusV1().Pools().Watch(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	f := newFleet(t, a) // pool fra1, project acme
	expectEvent(t, w, watch.Added, "fra1")

	// One CA, one SSH user CA: what hosts and agents pin is the same.
	for _, path := range []string{"/ca.crt", "/ssh-user-ca.pub"} {
		fromA, fromB := publicFile(t, a, path), publicFile(t, b, path)
		if len(fromA) == 0 || !bytes.Equal(fromA, fromB) {
			t.Errorf("%s differs between the replicas:\n%s\n%s", path, fromA, fromB)
		}
	}

	// The operator credential of a, through b, whose own serving
	// certificate the shared CA signed.
	viaB := rest.CopyConfig(a.Config)
	viaB.Host = b.URL
	if _, err := versioned.NewForConfigOrDie(viaB).NodusV1().Pools().Get(ctx(t), "fra1", metav1.GetOptions{}); err != nil {
		t.Errorf("a's operator credential through b: %v", err)
	}

	// An agent enrolled through a reports through b.
	agentDir := t.TempDir()
	if _, err := testfleet.EnrollAgent(ctx(t), a.Client, a.URL, "ha-node",
		nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "nodus-test-login"}, agentDir); err != nil {
		t.Fatal(err)
	}
	agentViaB, err := testfleet.AgentConfig(b.URL, agentDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Heartbeat(ctx(t), versioned.NewForConfigOrDie(agentViaB), "ha-node", nodusv1.NodeHeartbeat{AgentGeneration: 1}); err != nil {
		t.Errorf("an agent enrolled through a, beating through b: %v", err)
	}

	// A customer logged in to both replicas releases through b once a is
	// gone, with no load balancer in between.
	f.host(t, "gpu-ha", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, a.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	alice := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	if out, code := alice.run("", "login", "--server", a.URL+","+b.URL, "--token", f.admin.BearerToken, "--ca-file", caFile); code != 0 {
		t.Fatalf("login to both replicas: %d %s", code, out)
	}
	a.Stop()
	if out, code := alice.run("", "release", "acme/gpu-ha", "--yes"); code != 0 || !strings.Contains(out, "released acme/gpu-ha at epoch 2") {
		t.Fatalf("release with replica a down: %d\n%s", code, out)
	}
	f.s = b
	if st := f.reservation(t, "gpu-ha").Status; st.Epoch != 2 {
		t.Errorf("the release through b: %+v", st)
	}
}

// publicFile GETs one of the server's public files.
func publicFile(t *testing.T, s *testserver.Server, path string) []byte {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.Config.TLSClientConfig.CAData)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", path, resp.Status, body)
	}
	return body
}

// TestReplicasRefuseToStartWrongly: another cluster key, a missing etcd
// client certificate, an etcd that is down, no cluster key at all: each
// is refused with what to do, and nothing is written, in etcd or DIR.
func TestReplicasRefuseToStartWrongly(t *testing.T) {
	testserver.KeepLogs(t)
	etcd := externalEtcd(t)
	key := clusterKeyFile(t)
	first, err := testserver.Start(t.TempDir(), nil, onCluster(etcd, key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Stop)
	tlsConfig, err := etcd.TLS.Config()
	if err != nil {
		t.Fatal(err)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL}, TLS: tlsConfig, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	stored := func() (int64, []byte) {
		resp, err := client.Get(ctx(t), clusteridentity.EtcdKey)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the stored identity: %v %v", err, resp)
		}
		return resp.Kvs[0].ModRevision, resp.Kvs[0].Value
	}
	revision, sealed := stored()

	down, err := testfleet.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		tweak func(*server.Options)
		want  string
	}{
		{"another cluster key", onCluster(etcd, clusterKeyFile(t)), "every replica must be given the same --cluster-key-file"},
		{"no etcd client certificate", func(o *server.Options) {
			onCluster(etcd, key)(o)
			o.EtcdCertFile, o.EtcdKeyFile = "", ""
			o.EtcdProbeTimeout = 3 * time.Second
		}, "give --etcd-certfile and --etcd-keyfile"},
		{"etcd down", func(o *server.Options) {
			onCluster(etcd, key)(o)
			o.EtcdServers = []string{"https://127.0.0.1:" + itoa(down)}
			o.EtcdProbeTimeout = 2 * time.Second
		}, "etcd did not answer within 2s"},
		{"no cluster key", func(o *server.Options) {
			onCluster(etcd, key)(o)
			o.ClusterKeyFile = ""
		}, "--cluster-key-file is required with an external etcd"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := testserver.Start(dir, nil, c.tweak)
			if err == nil {
				s.Stop()
				t.Fatal("the replica started")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("the refused replica wrote %v into its data directory", left)
			}
			if r, v := stored(); r != revision || !bytes.Equal(v, sealed) {
				t.Error("the refused replica changed the stored identity")
			}
		})
	}
	// The first replica is unaffected.
	if _, err := first.Client.NodusV1().Pools().List(ctx(t), metav1.ListOptions{}); err != nil {
		t.Errorf("the first replica after the refusals: %v", err)
	}

	// A key rotation: the identity is sealed anew, the CA stays.
	newKey := clusterKeyFile(t)
	rotate := server.NewOptions(nil)
	rotate.DataDir = t.TempDir()
	onCluster(etcd, key)(rotate)
	if err := rotate.RotateClusterKey(ctx(t), newKey); err != nil {
		t.Fatal(err)
	}
	if _, err := testserver.Start(t.TempDir(), nil, onCluster(etcd, key)); err == nil || !strings.Contains(err.Error(), "same --cluster-key-file") {
		t.Errorf("the old key after a rotation: %v", err)
	}
	rotated, err := testserver.Start(t.TempDir(), nil, onCluster(etcd, newKey))
	if err != nil {
		t.Fatalf("a replica with the new key: %v", err)
	}
	defer rotated.Stop()
	if !bytes.Equal(publicFile(t, rotated, "/ca.crt"), publicFile(t, first, "/ca.crt")) {
		t.Error("the rotation changed the cluster CA")
	}
}

// TestAnEmbeddedServersKeyFollowsItsRotation: a server on embedded etcd
// keeps its cluster key in DIR/cluster.key. Rotated with
// --rotate-cluster-key-to, the identity was sealed with the new key and
// the file kept the old one: the next plain start was refused. And a
// DIR/cluster.key that went missing was replaced by a new key, which
// opened nothing, before the start was refused.
func TestAnEmbeddedServersKeyFollowsItsRotation(t *testing.T) {
	dir := t.TempDir()
	s, err := testserver.Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ca := publicFile(t, s, "/ca.crt")
	s.Stop()

	newKey := clusterKeyFile(t)
	rotate := server.NewOptions(nil)
	rotate.DataDir = dir
	if err := rotate.RotateClusterKey(ctx(t), newKey); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(newKey)
	if got, _ := os.ReadFile(filepath.Join(dir, "cluster.key")); !bytes.Equal(got, want) {
		t.Errorf("DIR/cluster.key after the rotation: %q, want the new key", got)
	}
	s, err = testserver.Start(dir, nil)
	if err != nil {
		t.Fatalf("a plain start after the rotation: %v", err)
	}
	if !bytes.Equal(publicFile(t, s, "/ca.crt"), ca) {
		t.Error("the rotation changed the CA")
	}
	s.Stop()

	if err := os.Remove(filepath.Join(dir, "cluster.key")); err != nil {
		t.Fatal(err)
	}
	if s, err := testserver.Start(dir, nil); err == nil || !strings.Contains(err.Error(), "cluster.key is missing") {
		if err == nil {
			s.Stop()
		}
		t.Errorf("a start without its cluster key: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a start refused for a missing key made one: %v", err)
	}
}
