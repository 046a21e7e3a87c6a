package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/nodus-dev/nodus/pkg/failover"
)

// LoginOptions are `nodus login`'s.
type LoginOptions struct {
	*Globals
	Streams
	Server, Token, CAFile, Adopt string
	// Name is the context an adopted kubeconfig's is stored as; Replace
	// lets it take a context of that name that is another server's.
	Name    string
	Replace bool
}

func newLoginCommand(g *Globals, s Streams) *cobra.Command {
	o := &LoginOptions{Globals: g, Streams: s}
	cmd := &cobra.Command{
		Use:   "login (--server URL --token TOKEN [--ca-file FILE] | --kubeconfig FILE)",
		Short: "Store a server and a credential in the nodus configuration",
		Example: `  nodus login --server https://nodus.example:8443 --ca-file ca.crt   # asks for the token
  nodus login --server https://nodus.example:8443 --token - --ca-file ca.crt < token.txt
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
	cmd.Flags().StringVar(&o.Token, "token", "", "your access token; - reads it from stdin, and without the flag nodus asks for it on a terminal (or reads $"+TokenEnv+"): a token on the command line is seen by every local user (ps) and kept in your shell's history")
	cmd.Flags().StringVar(&o.CAFile, "ca-file", "", "the server's CA certificate")
	cmd.Flags().StringVar(&o.Adopt, "from-kubeconfig", "", "adopt the current context of this kubeconfig (same as login --kubeconfig FILE)")
	cmd.Flags().StringVar(&o.Name, "name", "", "with --kubeconfig: store the adopted context under this name (default: its own)")
	cmd.Flags().BoolVar(&o.Replace, "replace", false, "with --kubeconfig: replace a context of the same name that is another server's")
	return cmd
}

// TokenEnv is the environment variable `nodus login` reads the access
// token from when --token is not given.
const TokenEnv = "NODUS_TOKEN"

// Validate checks the flags, and reads the token where they say.
func (o *LoginOptions) Validate() error {
	if o.Adopt != "" {
		return nil
	}
	if o.Name != "" || o.Replace {
		return usageError(errors.New("--name and --replace are for adopting a kubeconfig (--kubeconfig FILE)"))
	}
	if o.Server == "" {
		return usageError(fmt.Errorf("give --server and --token, or --from-kubeconfig"))
	}
	if _, err := failover.Servers(o.Server); err != nil {
		return usageError(fmt.Errorf("--server: %w", err))
	}
	token, err := o.readToken()
	if err != nil {
		return err
	}
	o.Token = token
	return nil
}

// readToken is the token --token gives: as it is, read from stdin for "-",
// else $NODUS_TOKEN, else asked for on the terminal without echo.
func (o *LoginOptions) readToken() (string, error) {
	var token string
	switch {
	case o.Token == "-":
		const maxToken = 64 << 10
		line, err := bufio.NewReader(io.LimitReader(o.In, maxToken+1)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("reading the token from stdin: %w", err)
		}
		if len(line) > maxToken {
			return "", usageError(errors.New("stdin holds no token: its first line is longer than 64 KiB"))
		}
		token = line
	case o.Token != "":
		token = o.Token
	case os.Getenv(TokenEnv) != "":
		token = os.Getenv(TokenEnv)
	default:
		in, ok := o.In.(*os.File)
		if !ok || !term.IsTerminal(int(in.Fd())) {
			return "", usageError(fmt.Errorf("give the token: --token - reads it from stdin, $%s holds it, or run nodus login on a terminal to be asked for it", TokenEnv))
		}
		fmt.Fprint(o.Err, "access token: ")
		typed, err := term.ReadPassword(int(in.Fd()))
		fmt.Fprintln(o.Err)
		if err != nil {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		token = string(typed)
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", usageError(errors.New("the access token is empty"))
	}
	return token, nil
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
			return "", usageError(fmt.Errorf("%s: context %q names cluster %q and user %q, which the file does not both have", oneLine(o.Adopt), oneLine(name), oneLine(ctx.Cluster), oneLine(ctx.AuthInfo)))
		}
		// As --server: https, verified. An adopted context's credential goes
		// to its server with every request, in clear over http, and to
		// whoever answers when TLS is not verified.
		if _, err := failover.Servers(cluster.Server); err != nil {
			return "", usageError(fmt.Errorf("%s: context %q: %w", oneLine(o.Adopt), oneLine(name), err))
		}
		// Its replicas, where it lists them, are where its credential goes
		// first: the server every check and listing shows, then the others,
		// each as its server is checked.
		if replicas, err := contextServers(src, src.CurrentContext); err != nil || len(replicas) == 0 || strings.TrimSuffix(replicas[0], "/") != strings.TrimSuffix(cluster.Server, "/") {
			why := fmt.Sprintf("they do not begin with its server %s", oneLine(cluster.Server))
			if err != nil {
				why = oneLine(err)
			}
			return "", usageError(fmt.Errorf("%s: context %q: the replicas its cluster lists (%s) are not this server's: %s; adopt a kubeconfig whose replicas begin with its server, or log in with nodus login --server A,B,…",
				oneLine(o.Adopt), oneLine(name), serversExtension, why))
		}
		// A user entry that runs a command (exec) or a provider's plugin
		// would run it on every nodus command: one adopted from a file
		// someone else wrote is a command of theirs. nodus-server's own
		// kubeconfigs hold a token or a client certificate.
		if user.Exec != nil || user.AuthProvider != nil {
			return "", usageError(fmt.Errorf("%s: context %q authenticates by running a command (exec or auth-provider), which nodus does not adopt: log in with a token (nodus login --server URL --ca-file FILE) or adopt a kubeconfig with a token or client certificate",
				oneLine(o.Adopt), oneLine(name)))
		}
		if cluster.InsecureSkipTLSVerify {
			return "", usageError(fmt.Errorf("%s: context %q skips the verification of its server's certificate (insecure-skip-tls-verify): give the cluster its CA (certificate-authority-data) instead",
				oneLine(o.Adopt), oneLine(name)))
		}
		if o.Name != "" {
			name = o.Name
		}
		// Every nodus-server names its admin context alike: another
		// server's adopted under the name would drop the first's address,
		// CA and credential without a word. The same server's (a
		// credential renewed) is taken again.
		if had := serverOf(cfg, name); had != "" && had != cluster.Server && !o.Replace {
			return "", usageError(fmt.Errorf("context %s is another server's (%s, not %s): give this one another name with --name NAME, or replace that one with --replace",
				oneLine(name), oneLine(had), oneLine(cluster.Server)))
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
			// Checked here, where the mistake is: stored as it is, a file
			// that is not a PEM certificate (DER, a key) fails every later
			// command with a TLS error.
			if _, err := certutil.ParseCertsPEM(cluster.CertificateAuthorityData); err != nil {
				return "", usageError(fmt.Errorf("--ca-file %s holds no PEM certificate (%v): give the server's CA certificate, as nodus-server writes it (ca.crt)", oneLine(o.CAFile), err))
			}
		}
		cfg.Clusters[name], cfg.AuthInfos[name] = cluster, &clientcmdapi.AuthInfo{Token: o.Token}
	}
	return name, nil
}

// serverOf is the server a context of cfg, or a cluster of its name, points
// at ("" when neither is there).
func serverOf(cfg *clientcmdapi.Config, name string) string {
	if ctx, ok := cfg.Contexts[name]; ok {
		if c, ok := cfg.Clusters[ctx.Cluster]; ok {
			return c.Server
		}
	}
	if c, ok := cfg.Clusters[name]; ok {
		return c.Server
	}
	return ""
}
