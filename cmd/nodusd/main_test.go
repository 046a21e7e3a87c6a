package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/safelogs/safelogstest"
)

func TestMain(m *testing.M) { safelogstest.Main(m, main) }

// TestNodusdLogsControlCharactersAsText: nodusd's journal holds names,
// paths and messages tenants and the server chose (a tenant's file names
// in a cleaning's errors, say); klog wrote a value with a line break in it
// as it was, escape sequences included. The real command, failing on a
// file name that carries them, logs them escaped.
func TestNodusdLogsControlCharactersAsText(t *testing.T) {
	config := filepath.Join(t.TempDir(), "nodusd"+safelogstest.Forged+".yaml")
	if err := os.WriteFile(config, []byte("notAKey: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	safelogstest.FailsLoggingAsText(t, "run", "--config", config)
}

// The configuration file shipped in deploy/ must be one nodusd accepts.
func TestShippedConfigParses(t *testing.T) {
	data, err := os.ReadFile("../../deploy/nodusd-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var o agent.Options
	if err := yaml.UnmarshalStrict(data, &fileConfig{&o}); err != nil {
		t.Fatalf("deploy/nodusd-config.yaml: %v", err)
	}
	if o.StateDir != "/var/lib/nodusd" || o.Grace != 5*time.Second || o.BorrowerUser != "nodus-borrower" ||
		o.BorrowerSlots != 8 || o.ExecutionsDir != "/var/lib/nodus-executions" {
		t.Errorf("parsed %+v", o)
	}
	if err := yaml.UnmarshalStrict([]byte("borrowerSlots: -1\n"), &fileConfig{&o}); err == nil {
		t.Error("negative borrowerSlots accepted")
	}
	if err := yaml.UnmarshalStrict([]byte("borrowerSlot: 2\n"), &fileConfig{&o}); err == nil {
		t.Error("a misspelt key accepted")
	}
}

// TestTheEnrollmentTokenNeedNotBeOnTheCommandLine: every account on a host
// reads a process's arguments; `nodusd enroll` takes the token from stdin
// (--token -) or $NODUSD_ENROLLMENT_TOKEN too, and says how when none is
// given, before it reaches any server.
func TestTheEnrollmentTokenNeedNotBeOnTheCommandLine(t *testing.T) {
	t.Setenv(enrollmentTokenEnv, "")
	for _, c := range []struct {
		name, flag, stdin, env, want, err string
	}{
		{name: "the flag", flag: "enroll_gpu-001.s3cret", want: "enroll_gpu-001.s3cret"},
		{name: "stdin", flag: "-", stdin: "enroll_gpu-001.fr0mstdin\nmore\n", want: "enroll_gpu-001.fr0mstdin"},
		{name: "stdin without a line break", flag: "-", stdin: "  enroll_gpu-001.n0newline ", want: "enroll_gpu-001.n0newline"},
		{name: "the environment", env: "enroll_gpu-001.fr0menv\n", want: "enroll_gpu-001.fr0menv"},
		{name: "the flag before the environment", flag: "enroll_gpu-001.flag", env: "enroll_gpu-001.env", want: "enroll_gpu-001.flag"},
		{name: "nothing", err: "--token -"},
		{name: "an empty stdin", flag: "-", env: "enroll_gpu-001.env", err: "give the enrollment token"},
		{name: "a line past the bound", flag: "-", stdin: strings.Repeat("x", maxEnrollmentToken+1), err: "longer than 64 KiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(enrollmentTokenEnv, c.env)
			got, err := enrollmentToken(c.flag, strings.NewReader(c.stdin))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("got %q, %v; want an error saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}

	// Through the command: no token at all is refused before a server is asked.
	t.Cleanup(func() { _ = logsapi.ResetForTest(nil) }) // the command installs its logging once a process
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(""))
	cmd.SetArgs([]string{"enroll", "--server", "https://127.0.0.1:1", "--ca-hash", "sha256:" + strings.Repeat("0", 64), "--state-dir", t.TempDir()})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), enrollmentTokenEnv) {
		t.Errorf("enroll without a token: %v\n%s", err, out.String())
	}
}
