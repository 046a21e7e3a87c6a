package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X github.com/nodus-dev/nodus/pkg/cli.Version=…".
var Version = "dev"

// NewCommand is the nodus command with every verb.
func NewCommand(s Streams) (*cobra.Command, *Globals) {
	g := &Globals{}
	root := &cobra.Command{
		Use:           "nodus",
		Short:         "Rent and use whole GPU servers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.PersistentFlags().StringVar(&g.Kubeconfig, "kubeconfig", "", "nodus configuration (default $NODUS_CONFIG or ~/.config/nodus/config)")
	root.PersistentFlags().StringVar(&g.Context, "context", "", "use this context of the configuration")
	root.PersistentFlags().StringVarP(&g.Output, "output", "o", "", "output: wide, json or yaml")
	root.AddCommand(newLoginCommand(g, s), newConfigCommand(g, s), newHostsCommand(g, s), newSSHCommand(g, s), newReleaseCommand(g, s),
		&cobra.Command{
			Use: "version", Short: "Print the client and server versions", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				fmt.Fprintf(s.Out, "client: %s\n", Version)
				c, _, err := g.Client()
				if err != nil {
					return err
				}
				info, err := c.Discovery().ServerVersion()
				if err != nil {
					return err
				}
				fmt.Fprintf(s.Out, "server: %s\n", oneLine(info.GitVersion))
				return nil
			},
		})
	root.AddCommand(operatorCommands(g, s)...)
	root.AddCommand(executionsCommand(g, s), newLendCommand(g, s), newWithdrawCommand(g, s), newLendingCommand(g, s), newErrorsCommand(s))
	root.AddCommand(&cobra.Command{
		Use: "whoami", Short: "Who the server takes you for", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			raw, err := c.NodusV1().RESTClient().Get().AbsPath("/whoami").Do(cmd.Context()).Raw()
			if err != nil {
				return err
			}
			var me struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			}
			if err := json.Unmarshal(raw, &me); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "user:   %s\ngroups: %s\n", oneLine(me.Username), oneLine(strings.Join(me.Groups, ", ")))
			return nil
		},
	})
	usageErrors(root)
	return root, g
}

// usageErrors makes every mistake in a command line a usage error (exit 2,
// with the command's usage line): a wrong number of arguments, and a verb
// a group of verbs does not have, which cobra would answer with the
// group's help and exit 0.
func usageErrors(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		usageErrors(sub)
	}
	if cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			msg := fmt.Sprintf("%q is not a verb of %q", args[0], c.CommandPath())
			if c.SuggestionsMinimumDistance <= 0 {
				c.SuggestionsMinimumDistance = 2 // cobra's own default, set only where it suggests itself
			}
			if suggestions := c.SuggestionsFor(args[0]); len(suggestions) > 0 {
				msg += "; did you mean " + strings.Join(suggestions, " or ") + "?"
			}
			return usageError(fmt.Errorf("%s\nRun '%s --help' for its verbs.", msg, c.CommandPath()))
		}
		return
	}
	if validate := cmd.Args; validate != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := validate(c, args); err != nil {
				return usageError(fmt.Errorf("%v\nusage: %s", err, c.UseLine()))
			}
			return nil
		}
	}
}
