package integration

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/cli"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the CLI tests")

// nodusCLI runs the nodus command in-process with its own configuration.
type nodusCLI struct {
	t      *testing.T
	config string
}

func (n nodusCLI) run(stdin string, args ...string) (string, int) {
	var out bytes.Buffer
	cmd, g := cli.NewCommand(cli.Streams{In: strings.NewReader(stdin), Out: &out, Err: &out})
	if n.config != "" {
		args = append([]string{"--kubeconfig", n.config}, args...)
	}
	cmd.SetArgs(args)
	code := cli.Report(cmd.Execute(), g.Output, &out)
	return out.String(), code
}

// volatile are the parts of CLI output that change from run to run.
var volatile = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`request: [0-9a-f-]{36}`), "request: REQUEST-ID"},
	{regexp.MustCompile(`https://127\.0\.0\.1:\d+`), "https://SERVER"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`), "TIME"},
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	for _, v := range volatile {
		got = v.re.ReplaceAllString(got, v.repl)
	}
	path := filepath.Join("testdata", name+".golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

func TestCLIGolden(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "gpu-001", time.Now().Add(-time.Hour), time.Now().Add(10*24*time.Hour+12*time.Hour))
	f.host(t, "gpu-002", time.Now().Add(-time.Hour), time.Now().Add(10*24*time.Hour+12*time.Hour))
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, s.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	alice := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	out, code := alice.run("", "login", "--server", s.Config.Host, "--token", f.admin.BearerToken, "--ca-file", ca)
	if code != 0 {
		t.Fatalf("login: %d %s", code, out)
	}

	out, code = alice.run("", "hosts", "list", "-n", "acme")
	if code != 0 {
		t.Fatalf("hosts list: %d %s", code, out)
	}
	golden(t, "hosts-list", out)

	out, code = alice.run("", "hosts", "get", "acme/missing")
	if code != cli.ExitNotFound {
		t.Errorf("hosts get of a missing host: exit %d", code)
	}
	golden(t, "hosts-get-missing", out)

	out, code = alice.run("", "hosts", "list")
	if code != cli.ExitUsage {
		t.Errorf("hosts list without a project: exit %d: %s", code, out)
	}

	out, code = alice.run("wrong-name\n", "release", "acme/gpu-001")
	if code != cli.ExitUsage || !strings.Contains(out, "not confirmed") {
		t.Errorf("a release typed with another name must not happen: %d %s", code, out)
	}
	if st := f.reservation(t, "gpu-001").Status; st.Epoch != 1 {
		t.Fatalf("an unconfirmed release changed the host: %+v", st)
	}
	out, code = alice.run("", "release", "acme/gpu-001", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run") || f.reservation(t, "gpu-001").Status.Epoch != 1 {
		t.Errorf("dry run: %d %s", code, out)
	}
	out, code = alice.run("gpu-001\n", "release", "acme/gpu-001")
	if code != 0 {
		t.Fatalf("release: %d %s", code, out)
	}
	golden(t, "release", out)
	// Let the controller finish projecting the release, so that the next
	// release's If-Match names the current version.
	f.waitHost(t, "gpu-001", func(h *nodusv1.ReservedHost) bool {
		c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionEligible)
		return c != nil && c.Reason == "Released"
	})
	out, code = alice.run("", "release", "acme/gpu-001", "--yes")
	if code != cli.ExitConflict {
		t.Errorf("a second release: exit %d", code)
	}
	golden(t, "release-again", out)

	// login --kubeconfig FILE adopts FILE into the nodus configuration ($NODUS_CONFIG here).
	t.Setenv("NODUS_CONFIG", filepath.Join(t.TempDir(), "config"))
	operator := nodusCLI{t: t}
	if out, code := operator.run("", "login", "--kubeconfig", s.KubeconfigPath); code != 0 {
		t.Errorf("adopting admin.kubeconfig: %d %s", code, out)
	}
	if out, code := operator.run("", "hosts", "list", "-A"); code != 0 || !strings.Contains(out, "acme/gpu-002") {
		t.Errorf("the adopted operator context: %d %s", code, out)
	}
	if out, code := operator.run("", "config", "use-context", "nope"); code != cli.ExitUsage {
		t.Errorf("use-context of a missing context: %d %s", code, out)
	}

	viewer := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
	viewer.run("", "login", "--server", s.Config.Host, "--token", f.viewer.BearerToken, "--ca-file", ca)
	out, code = viewer.run("", "release", "acme/gpu-002", "--yes")
	if code != cli.ExitAuth {
		t.Errorf("a viewer's release: exit %d: %s", code, out)
	}
	out, code = viewer.run("", "hosts", "get", "acme/gpu-002", "-o", "json")
	if code != 0 || !strings.Contains(out, `"kind":"ReservedHost"`) {
		t.Errorf("-o json: %d %s", code, out)
	}
	out, code = viewer.run("", "release", "acme/gpu-002", "--yes", "-o", "json")
	if code != cli.ExitAuth || !strings.Contains(out, `"kind":"Status"`) || !strings.Contains(out, `"requestId"`) {
		t.Errorf("-o json prints the Status body as is: %d %s", code, out)
	}
}
