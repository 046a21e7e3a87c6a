// Command nodus-server runs the Nodus control plane.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"

	"github.com/nodus-dev/nodus/pkg/safelogs"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/shutdownsignal"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

func newCommand() *cobra.Command {
	opts := server.NewOptions(os.Stdout)
	var printJoin bool
	var rotateTo string
	cmd := &cobra.Command{
		Use:   "nodus-server",
		Short: "Run the Nodus control plane (API server, controllers, embedded etcd)",
		Example: `  # Start on embedded etcd under ~/.local/share/nodus, listening on 127.0.0.1:8443
  nodus-server

  # Then, in another shell
  kubectl --kubeconfig ~/.local/share/nodus/admin.kubeconfig get reservedhosts -A

  # A replica of a cluster on external etcd (docs/ha.md), and the command that starts the next one
  nodus-server --etcd-servers=https://etcd-1:2379,https://etcd-2:2379,https://etcd-3:2379 \
    --etcd-cafile=/etc/nodus/etcd-ca.crt --etcd-certfile=/etc/nodus/etcd-client.crt --etcd-keyfile=/etc/nodus/etcd-client.key \
    --cluster-key-file=/etc/nodus/cluster.key --bind-address=0.0.0.0 --tls-san=nodus.example.com
  nodus-server --etcd-servers=... --cluster-key-file=... --print-join-command`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		// Its log holds names and messages tenants and agents chose:
		// written as text only (safelogs).
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return safelogs.Install(cmd.Flags(), os.Stderr)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printJoin {
				line, err := opts.JoinCommand()
				if err != nil {
					return fmt.Errorf("nodus-server: %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), line)
				return nil
			}
			if rotateTo != "" {
				if err := opts.RotateClusterKey(cmd.Context(), rotateTo); err != nil {
					return fmt.Errorf("nodus-server: %w", err)
				}
				if opts.ClusterKeyFile == "" {
					fmt.Fprintf(cmd.OutOrStdout(), "the cluster identity is sealed with %s now, and %s holds it for the next start\n", rotateTo, filepath.Join(opts.DataDir, "cluster.key"))
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "the cluster identity is sealed with %s now: give it to every replica as --cluster-key-file before it restarts\n", rotateTo)
				return nil
			}
			ctx, stop := shutdownsignal.Context(cmd.Context(), "nodus-server", cmd.ErrOrStderr())
			defer stop()
			return run(ctx, opts)
		},
	}
	cmd.SetContext(context.Background())
	opts.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&rotateTo, "rotate-cluster-key-to", "", "Seal the cluster identity in etcd with the key in this file instead of --cluster-key-file's, and exit; every credential keeps working.")
	cmd.Flags().BoolVar(&printJoin, "print-join-command", false, "Print the command line that starts another replica of this cluster (same etcd, etcd credentials and cluster key), and exit.")
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
