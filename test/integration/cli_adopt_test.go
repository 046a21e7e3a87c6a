package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodus-dev/nodus/pkg/cli"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestCLIAdoptsOnlyAVerifiedHTTPSContext: login --server takes https only,
// but login --kubeconfig FILE took FILE's server as it was: an http one (the
// token then went in clear with every request), or one whose certificate
// was not verified (the token went to whoever answered).
func TestCLIAdoptsOnlyAVerifiedHTTPSContext(t *testing.T) {
	s := testserver.StartTestServer(t)
	t.Setenv("NODUS_CONFIG", filepath.Join(t.TempDir(), "config"))
	operator := nodusCLI{t: t}
	for what, change := range map[string]func(server string) (string, bool){
		"an http server":                   func(server string) (string, bool) { return strings.Replace(server, "https://", "http://", 1), false },
		"an unverified server certificate": func(server string) (string, bool) { return server, true },
	} {
		cfg, err := clientcmd.LoadFromFile(s.KubeconfigPath)
		if err != nil {
			t.Fatal(err)
		}
		cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
		cluster.Server, cluster.InsecureSkipTLSVerify = change(cluster.Server)
		if cluster.InsecureSkipTLSVerify {
			cluster.CertificateAuthorityData = nil
		}
		file := filepath.Join(t.TempDir(), "kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, file); err != nil {
			t.Fatal(err)
		}
		if out, code := operator.run("", "login", "--kubeconfig", file); code != cli.ExitUsage {
			t.Errorf("adopting a context with %s: exit %d, want %d: %s", what, code, cli.ExitUsage, out)
		}
	}
	if _, err := os.Stat(os.Getenv("NODUS_CONFIG")); err == nil {
		if out, code := operator.run("", "whoami"); code == 0 {
			t.Errorf("a context was adopted: %s", out)
		}
	}
	if out, code := operator.run("", "login", "--kubeconfig", s.KubeconfigPath); code != 0 {
		t.Errorf("adopting the server's own kubeconfig: %d %s", code, out)
	}
}
