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
				fmt.Fprintf(s.Out, "server: %s\n", info.GitVersion)
				return nil
			},
		})
	root.AddCommand(operatorCommands(g, s)...)
	root.AddCommand(executionsCommand(g, s), newLendCommand(g, s), newWithdrawCommand(g, s), newLendingCommand(g, s))
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
			fmt.Fprintf(s.Out, "user:   %s\ngroups: %s\n", me.Username, strings.Join(me.Groups, ", "))
			return nil
		},
	})
	return root, g
}
