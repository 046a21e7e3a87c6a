package safelogs

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/terminalsafe"
)

// TestALogShowsControlCharactersAsText: klog writes a value with a line
// break in it as it is, line by line, so a name, a path or a message a
// tenant or a server chose put its escape sequences into the host's
// journal. Installed, every entry reaches the output escaped, and the
// verbosity the flags give still decides what is written.
func TestALogShowsControlCharactersAsText(t *testing.T) {
	fs := pflag.NewFlagSet("nodusd", pflag.ContinueOnError)
	logs.AddFlags(fs) // as cli.Run does
	if err := fs.Parse([]string{"-v=2", "--vmodule=safelogs_test=3"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Install(fs, &out); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logsapi.ResetForTest(nil) }) // for the next test of this process
	forged := "home/x\n\x1b]0;owned\x07\rE1207 00:00:00.000000 1 forged.go:1] \"forged\"\u202e"
	klog.ErrorS(errors.New("removing "+forged), "the cleaning failed", "user", "bob\n\x1b[2J")
	klog.InfoS("a name", "reservation", forged)
	klog.Infof("an unstructured %s", forged)
	klog.Warningf("a library's message: %s", "line\nE1207 00:00:00.000000 1 forged.go:1] \"forged\"")
	klog.V(2).InfoS("at the verbosity the flags give", "path", forged)
	klog.V(3).InfoS("raised for this file by --vmodule")
	klog.V(4).InfoS("above it")
	klog.Background().V(2).Info("a contextual logger at it")
	klog.Background().V(4).Info("a contextual logger above it")
	klog.Flush()

	got := out.String()
	if strings.ContainsFunc(got, func(r rune) bool { return terminalsafe.IsControl(r) || terminalsafe.IsDirectionControl(r) }) {
		t.Errorf("a control character reached the log:\n%q", got)
	}
	for _, want := range []string{`the cleaning failed`, `\x1b]0;owned\x07\x0d`, `\x1b[2J`, `\u202e`, "an unstructured home/x\n",
		"at the verbosity the flags give", "a contextual logger at it", "raised for this file by --vmodule"} {
		if !strings.Contains(got, want) {
			t.Errorf("the log has no %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"above it"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("the log has %q, above the verbosity the flags give:\n%s", unwanted, got)
		}
	}
	// A forged line stays inside its entry: indented, never at a line's start.
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "E1207 00:00:00.000000 1 forged.go") {
			t.Errorf("a value forged a log entry of its own: %q", line)
		}
	}
}
