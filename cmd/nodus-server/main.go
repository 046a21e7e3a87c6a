// Command nodus-server runs the Nodus control plane.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"

	"github.com/nodus-dev/nodus/pkg/server"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

func newCommand() *cobra.Command {
	opts := server.NewOptions(os.Stdout)
	cmd := &cobra.Command{
		Use:   "nodus-server",
		Short: "Run the Nodus control plane (API server, controllers, embedded etcd)",
		Example: `  # Start on embedded etcd under ~/.local/share/nodus, listening on 127.0.0.1:8443
  nodus-server

  # Then, in another shell
  kubectl --kubeconfig ~/.local/share/nodus/admin.kubeconfig get reservedhosts -A`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return run(ctx, opts)
		},
	}
	cmd.SetContext(context.Background())
	opts.AddFlags(cmd.Flags())
	return cmd
}

func run(ctx context.Context, opts *server.Options) error {
	cfg, err := opts.Config()
	if err != nil {
		return fmt.Errorf("nodus-server: %w", err)
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		return fmt.Errorf("nodus-server: %w", err)
	}
	return srv.Run(ctx)
}
