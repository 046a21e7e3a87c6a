package server

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/nodus-dev/nodus/pkg/pki"
)

func TestFeatureGatesFlagNamesOnlyTheLibrarysGates(t *testing.T) {
	o := NewOptions(io.Discard)
	fs := pflag.NewFlagSet("nodus-server", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--feature-gates=ListFromCacheSnapshot=true,NoSuchGate=false"}); err != nil {
		t.Fatal(err)
	}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "NoSuchGate is not a feature gate") {
		t.Fatalf("Validate: %v, want NoSuchGate refused", err)
	}
	if strings.Contains(err.Error(), "ListFromCacheSnapshot") {
		t.Fatalf("Validate refused a gate the library has: %v", err)
	}
}

func TestListFromCacheSnapshotIsOffUnlessTheOperatorTurnsItOn(t *testing.T) {
	t.Cleanup(func() { _, _ = apiLibraryVersion(nil) }) // the gates are the process's
	for _, c := range []struct {
		gates map[string]bool
		want  bool
	}{
		{nil, false},
		{map[string]bool{string(features.ListFromCacheSnapshot): true}, true},
		{map[string]bool{string(features.ListFromCacheSnapshot): false}, false},
	} {
		if _, err := apiLibraryVersion(c.gates); err != nil {
			t.Fatal(err)
		}
		if got := utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot); got != c.want {
			t.Errorf("with --feature-gates %v: ListFromCacheSnapshot %v, want %v", c.gates, got, c.want)
		}
	}
}

func TestTheEmbeddedEtcdQuotaAndTheHeartbeatIntervalHaveBounds(t *testing.T) {
	for _, c := range []struct {
		flag string
		ok   bool
	}{
		{"--embedded-etcd-quota-bytes=33554432", true},
		{"--embedded-etcd-quota-bytes=33554431", false},
		{"--embedded-etcd-quota-bytes=0", false},
		// Agents beat at most a minute apart, whatever the server says.
		{"--heartbeat-interval=60s", true},
		{"--heartbeat-interval=61s", false},
		{"--heartbeat-interval=999h", false},
		{"--heartbeat-interval=500ms", false},
	} {
		o := NewOptions(io.Discard)
		fs := pflag.NewFlagSet("nodus-server", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{c.flag}); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate says %v", c.flag, err)
		}
	}
	if o := NewOptions(io.Discard); o.EmbeddedEtcdQuotaBytes != 8<<30 {
		t.Errorf("the default quota is %d bytes, want 8 GiB", o.EmbeddedEtcdQuotaBytes)
	}
}

// TestATLSSANIsAHost: a --tls-san that is a URL or host:port was taken as
// a DNS name no client ever matches (and, never covered, the serving
// certificate was issued anew at every start).
func TestATLSSANIsAHost(t *testing.T) {
	for _, c := range []struct {
		san string
		ok  bool
	}{
		{"nodus.example.com", true}, {"10.0.0.7", true}, {"fd00::7", true}, {"*.nodus.example.com", true}, {"API.Example.com.", true},
		{"https://nodus.example.com:8443", false}, {"nodus.example.com:8443", false}, {"", false}, {"Nodus_Example", false},
	} {
		o := NewOptions(io.Discard)
		o.TLSSANs = []string{c.san}
		if err := o.Validate(); (err == nil) != c.ok {
			t.Errorf("--tls-san %q: Validate says %v", c.san, err)
		}
	}
}

// TestTheJoinCommandCarriesOnlyTheClustersFlags: the printed command line
// named this replica's bind address, on which another machine cannot
// listen.
func TestTheJoinCommandCarriesOnlyTheClustersFlags(t *testing.T) {
	for _, c := range []struct {
		bind    string
		carried bool
	}{{"10.0.0.1", false}, {"0.0.0.0", true}, {"::", true}} {
		o := NewOptions(io.Discard)
		o.EtcdServers, o.ClusterKeyFile, o.BindAddress = []string{"https://etcd-1:2379"}, "/etc/nodus/cluster.key", c.bind
		line, err := o.JoinCommand()
		if err != nil {
			t.Fatal(err)
		}
		if carried := strings.Contains(line, "--bind-address"); carried != c.carried || !strings.Contains(line, "--cluster-key-file=/etc/nodus/cluster.key") {
			t.Errorf("bound to %s: %s", c.bind, line)
		}
	}
}

// TestACACertificateWithoutItsKeyIsNotReplaced: a ca.crt whose key was
// lost was replaced by a new CA, unasked, when etcd had no identity yet.
func TestACACertificateWithoutItsKeyIsNotReplaced(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("old")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := localIdentity(dir); err == nil || !strings.Contains(err.Error(), "no ca.key") {
		t.Errorf("a ca.crt without its key: %v", err)
	}
	if _, err := localIdentity(t.TempDir()); err != nil {
		t.Errorf("an empty directory: %v", err)
	}
}

// TestARunningServerRenewsWhatNearsItsEnd: the daily check issues the
// serving certificate and the operator's credential anew within their last
// 30 days, and writes admin.kubeconfig again then, and only then (an
// operator's edit of it is kept otherwise).
func TestARunningServerRenewsWhatNearsItsEnd(t *testing.T) {
	o := NewOptions(io.Discard)
	o.DataDir = t.TempDir()
	ca, err := pki.NewCA("nodus-ca")
	if err != nil {
		t.Fatal(err)
	}
	id := &identity{ca: ca}
	if _, _, _, err := o.writeCredentials(id, "https://127.0.0.1:8443"); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(o.DataDir, "admin.kubeconfig")
	edited := []byte("# an operator's edit\n")
	if err := os.WriteFile(kubeconfig, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	if renewed, err := o.renewCredentials(id, "https://127.0.0.1:8443"); err != nil || len(renewed) != 0 {
		t.Fatalf("lasting credentials: renewed %v, %v", renewed, err)
	}
	if got, _ := os.ReadFile(kubeconfig); string(got) != string(edited) {
		t.Errorf("admin.kubeconfig was written again with nothing renewed")
	}
	for _, name := range []string{"serving", "admin"} {
		endsIn(t, ca, filepath.Join(o.pkiDir(), name+".crt"), 10*24*time.Hour)
	}
	renewed, err := o.renewCredentials(id, "https://127.0.0.1:8443")
	if err != nil || len(renewed) != 3 {
		t.Fatalf("credentials near their end: renewed %v, %v", renewed, err)
	}
	got, _ := os.ReadFile(kubeconfig)
	admin, _ := os.ReadFile(filepath.Join(o.pkiDir(), "admin.crt"))
	if !strings.Contains(string(got), base64.StdEncoding.EncodeToString(admin)) {
		t.Errorf("admin.kubeconfig does not hold the renewed credential")
	}
}

// endsIn signs the certificate at path again, with its key, to end in left.
func endsIn(t *testing.T, ca *pki.CA, path string, left time.Duration) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cert.NotAfter = time.Now().Add(left)
	der, err := x509.CreateCertificate(rand.Reader, cert, ca.Cert, cert.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
