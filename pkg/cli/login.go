package cli

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodus-dev/nodus/pkg/failover"
)

// LoginOptions are `nodus login`'s.
type LoginOptions struct {
	*Globals
	Streams
	Server, Token, CAFile, Adopt string
}

func newLoginCommand(g *Globals, s Streams) *cobra.Command {
	o := &LoginOptions{Globals: g, Streams: s}
	cmd := &cobra.Command{
		Use:   "login (--server URL --token TOKEN [--ca-file FILE] | --kubeconfig FILE)",
		Short: "Store a server and a credential in the nodus configuration",
		Example: `  nodus login --server https://nodus.example:8443 --token alice-laptop.SECRET --ca-file ca.crt
  # several replicas, without a load balancer: nodus moves to the next when one fails
  nodus login --server https://nodus-1:8443,https://nodus-2:8443,https://nodus-3:8443 --token alice-laptop.SECRET --ca-file ca.crt
  # adopt an existing kubeconfig, such as the operator's:
  nodus login --kubeconfig ~/.local/share/nodus/admin.kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if o.Adopt == "" && o.Server == "" && o.Globals.Kubeconfig != "" {
				// login --kubeconfig FILE adopts FILE into the nodus configuration.
				o.Adopt, o.Globals.Kubeconfig = o.Globals.Kubeconfig, ""
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run()
		},
	}
	cmd.Flags().StringVar(&o.Server, "server", "", "nodus-server URL, or the comma-separated URLs of several replicas")
	cmd.Flags().StringVar(&o.Token, "token", "", "your access token")
	cmd.Flags().StringVar(&o.CAFile, "ca-file", "", "the server's CA certificate")
	cmd.Flags().StringVar(&o.Adopt, "from-kubeconfig", "", "adopt the current context of this kubeconfig (same as login --kubeconfig FILE)")
	return cmd
}

// Validate checks the flags.
func (o *LoginOptions) Validate() error {
	if o.Adopt != "" {
		return nil
	}
	if o.Server == "" || o.Token == "" {
		return usageError(fmt.Errorf("give --server and --token, or --from-kubeconfig"))
	}
	if _, err := failover.Servers(o.Server); err != nil {
		return usageError(fmt.Errorf("--server: %w", err))
	}
	return nil
}

// Run writes the context and makes it current.
func (o *LoginOptions) Run() error {
	path := o.ConfigPath()
	var name string
	err := updateConfig(path, func(cfg *clientcmdapi.Config) error {
		var err error
		if name, err = o.addContext(cfg); err != nil {
			return err
		}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		cfg.CurrentContext = name
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "logged in: context %s in %s\n", oneLine(name), oneLine(path))
	return nil
}

// addContext adds the cluster and user the login names to cfg, and
// returns the context's name.
func (o *LoginOptions) addContext(cfg *clientcmdapi.Config) (string, error) {
	var name string
	var err error
	if o.Adopt != "" {
		src, err := clientcmd.LoadFromFile(o.Adopt)
		if err != nil {
			return "", usageError(err)
		}
		if err := clientcmdapi.FlattenConfig(src); err != nil {
			return "", err
		}
		ctx, ok := src.Contexts[src.CurrentContext]
		if !ok {
			return "", usageError(fmt.Errorf("%s has no current context", o.Adopt))
		}
		name = src.CurrentContext
		cluster, user := src.Clusters[ctx.Cluster], src.AuthInfos[ctx.AuthInfo]
		if cluster == nil || user == nil {
			return "", usageError(fmt.Errorf("%s: context %q names cluster %q and user %q, which the file does not both have", o.Adopt, name, ctx.Cluster, ctx.AuthInfo))
		}
		cfg.Clusters[name], cfg.AuthInfos[name] = cluster, user
	} else {
		servers, _ := failover.Servers(o.Server)
		u, _ := url.Parse(servers[0])
		name = strings.ReplaceAll(u.Host, ":", "-")
		cluster := &clientcmdapi.Cluster{}
		if err := withServers(cluster, servers); err != nil {
			return "", err
		}
		if o.CAFile != "" {
			if cluster.CertificateAuthorityData, err = os.ReadFile(o.CAFile); err != nil {
				return "", usageError(err)
			}
		}
		cfg.Clusters[name], cfg.AuthInfos[name] = cluster, &clientcmdapi.AuthInfo{Token: o.Token}
	}
	return name, nil
}
