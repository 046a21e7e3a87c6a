package cli

import (
	"fmt"
	"io/fs"
	"sort"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/docs"
	"github.com/nodus-dev/nodus/pkg/apierror"
)

// newErrorsCommand prints the page of an error reason from the pages this
// binary carries: a failure of nodus' own may be that the server cannot
// be reached, or not trusted, to serve it.
func newErrorsCommand(s Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "errors [REASON]",
		Short: "Explain an error's reason: what happened and what to do",
		Long: "Print the page of an error's reason, as an error names it (the reason of the server's answer, or one of nodus' own).\n" +
			"Without a reason, list them. The pages are those this nodus was built with; a server serves the pages of its own reasons, as its version has them, at /docs/errors/REASON.",
		Example: "  nodus errors AnswerRefused\n  nodus errors NodeReserved",
		Args:    cobra.MaximumNArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return reasonNames(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				fmt.Fprintln(s.Out, "nodus' own (exit code):")
				for _, r := range cliReasons {
					fmt.Fprintf(s.Out, "  %-28s %d  %s\n", r.Name, r.Exit, r.Summary)
				}
				fmt.Fprintln(s.Out, "the server's (HTTP code):")
				for _, r := range apierror.All() {
					fmt.Fprintf(s.Out, "  %-28s %d  %s\n", r.Name, r.Code, r.Summary)
				}
				return nil
			}
			page, err := reasonPage(args[0])
			if err != nil {
				return usageError(fmt.Errorf("%q is no reason nodus knows: `nodus errors` lists them", oneLine(args[0])))
			}
			_, err = s.Out.Write(page)
			return err
		},
	}
}

// reasonPage is the page of the reason named name: nodus' own first, then
// the server's.
func reasonPage(name string) ([]byte, error) {
	for _, r := range cliReasons {
		if r.Name == name {
			return fs.ReadFile(docs.CLIPages, "cli/"+name+".md")
		}
	}
	if apierror.IsRegistered(metav1.StatusReason(name)) {
		return fs.ReadFile(docs.ErrorPages, "errors/"+name+".md")
	}
	return nil, fs.ErrNotExist
}

func reasonNames() []string {
	var names []string
	for _, r := range cliReasons {
		names = append(names, r.Name)
	}
	for _, r := range apierror.All() {
		names = append(names, string(r.Name))
	}
	sort.Strings(names)
	return names
}
