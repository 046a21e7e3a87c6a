package cli

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func newConfigCommand(g *Globals, s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "The nodus configuration"}
	cmd.AddCommand(&cobra.Command{
		Use:   "use-context NAME",
		Short: "Make NAME the current context",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			path := g.ConfigPath()
			err := updateConfig(path, func(cfg *clientcmdapi.Config) error {
				if _, ok := cfg.Contexts[args[0]]; !ok {
					names := make([]string, 0, len(cfg.Contexts))
					for n := range cfg.Contexts {
						names = append(names, n)
					}
					sort.Strings(names)
					for i, n := range names {
						names[i] = oneLine(n)
					}
					return usageError(fmt.Errorf("no context %q in %s; there are: %v", args[0], oneLine(path), names))
				}
				cfg.CurrentContext = args[0]
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "current context: %s\n", args[0])
			return nil
		},
	}, &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			cfg, err := loadConfig(g.ConfigPath())
			if err != nil {
				return err
			}
			names := make([]string, 0, len(cfg.Contexts))
			for n := range cfg.Contexts {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				mark := " "
				if n == cfg.CurrentContext {
					mark = "*"
				}
				server := "(no such cluster: " + cfg.Contexts[n].Cluster + ")"
				if cluster := cfg.Clusters[cfg.Contexts[n].Cluster]; cluster != nil {
					server = cluster.Server
				}
				// A kubeconfig may be someone else's (adopted with --kubeconfig): its names are text to show, not to run.
				fmt.Fprintf(s.Out, "%s %s\t%s\n", mark, oneLine(n), oneLine(server))
			}
			return nil
		},
	})
	return cmd
}
