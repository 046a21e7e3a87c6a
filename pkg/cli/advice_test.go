package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nodus-dev/nodus/pkg/apierror"
)

// TestEveryCommandAnErrorSuggestsParses: the fix of each registered error,
// and each error's docs page, tell the user what to run next; a `nodus …`
// command there must be one this CLI takes: its verbs, its flags, its
// number of arguments.
func TestEveryCommandAnErrorSuggestsParses(t *testing.T) {
	texts := map[string]string{}
	for _, r := range apierror.All() {
		for _, req := range []apierror.Request{
			{Verb: "get", Resource: "executions", Namespace: "acme", Name: "job-1"},
			{Verb: "create", Resource: "reservedhosts", Subresource: "release-capacity", Namespace: "acme", Name: "gpu-7"},
			{Verb: "get", Resource: "nodes", Name: "gpu-001"},
		} {
			texts["the fix of "+string(r.Name)+" for "+req.Resource] = r.Fix(req)
		}
	}
	for _, r := range cliReasons {
		texts["the fix of "+r.Name] = r.Fix
	}
	pages, err := filepath.Glob("../../docs/errors/*.md")
	cliPages, cliErr := filepath.Glob("../../docs/cli/*.md")
	if err != nil || cliErr != nil || len(pages) == 0 || len(cliPages) == 0 {
		t.Fatalf("no docs pages: %v %v", err, cliErr)
	}
	pages = append(pages, cliPages...)
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		texts[page] = string(data)
	}
	command := regexp.MustCompile("`(nodus [^`]*)`")
	seen := 0
	for where, text := range texts {
		for _, m := range command.FindAllStringSubmatch(text, -1) {
			seen++
			if err := parses(strings.Fields(m[1])[1:]); err != nil {
				t.Errorf("%s: `%s`: %v", where, m[1], err)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no nodus command found in any fix or page")
	}
}

// parses says whether the nodus command would take args: a verb that
// exists, flags it has, as many arguments as it takes. A verb named alone
// ("`nodus lend`" in a sentence) is a mention, not a command to run: its
// arguments are not counted.
func parses(args []string) error {
	root, _ := NewCommand(Streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard})
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd == root {
		return errors.New("no such verb")
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	positional := cmd.Flags().Args()
	if cmd.HasSubCommands() && len(positional) > 0 {
		return errors.New("no such verb: " + positional[0])
	}
	if len(rest) == 0 {
		return nil
	}
	return cmd.ValidateArgs(positional)
}

// TestMistakesInACommandLineAreUsageErrors: a wrong number of arguments,
// or a verb a group does not have, exits 2 (README's usage class) with the
// usage, never 1, nor 0 with the group's help.
func TestMistakesInACommandLineAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"ssh"}, {"hosts", "get", "a", "b"}, {"nodes", "lst"}, {"executions", "bogus", "x"}, {"release"}} {
		var out strings.Builder
		cmd, g := NewCommand(Streams{In: strings.NewReader(""), Out: &out, Err: &out})
		cmd.SetArgs(args)
		if code := Report(cmd.Execute(), g.Output, &out); code != ExitUsage {
			t.Errorf("nodus %s: exit %d, want %d (usage):\n%s", strings.Join(args, " "), code, ExitUsage, out.String())
		}
	}
	var out strings.Builder
	cmd, g := NewCommand(Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	cmd.SetArgs([]string{"nodes", "lst"})
	Report(cmd.Execute(), g.Output, &out)
	if !strings.Contains(out.String(), "list") {
		t.Errorf("a mistyped verb suggests nothing: %s", out.String())
	}
	out.Reset()
	cmd, g = NewCommand(Streams{In: strings.NewReader(""), Out: &out, Err: &out})
	cmd.SetArgs([]string{"nodes"})
	if code := Report(cmd.Execute(), g.Output, &out); code != ExitOK || !strings.Contains(out.String(), "Available Commands") {
		t.Errorf("a group alone shows its verbs: exit %d\n%s", code, out.String())
	}
}
