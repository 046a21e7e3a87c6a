// Command nodusd is the Nodus host agent: it runs as root on every physical
// server, enrolls it, reports its inventory and heartbeats, and applies the
// access state of the reservations on it, fenced by epoch.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/component-base/cli"
	"sigs.k8s.io/yaml"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/failover"
	"github.com/nodus-dev/nodus/pkg/safelogs"
	"github.com/nodus-dev/nodus/pkg/shutdownsignal"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(cli.Run(newCommand()))
}

func newCommand() *cobra.Command {
	root := &cobra.Command{Use: "nodusd", Short: "The Nodus host agent", SilenceUsage: true,
		// Its log holds names, paths and messages tenants and the server
		// chose: written as text only (safelogs).
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return safelogs.Install(cmd.Flags(), os.Stderr)
		},
	}
	root.AddCommand(enrollCommand(), runCommand(), principalsCommand())
	return root
}

func enrollCommand() *cobra.Command {
	o := agent.EnrollOptions{StateDir: "/var/lib/nodusd"}
	cmd := &cobra.Command{
		Use:   "enroll --server URL [--token TOKEN | --token -] (--ca-file FILE | --ca-hash sha256:HEX)",
		Short: "Enroll this host with an enrollment token from an operator",
		Long: "Enroll this host with an enrollment token from an operator.\n\n" +
			"The token is --token's value; with --token - the first line of stdin; without --token, $" + enrollmentTokenEnv + ". " +
			"The last two keep it out of the process list other accounts on the host can read.",
		Example: `  # The line nodus pools token prints: paste the token when it asks
  nodusd enroll --server https://nodus.example:8443 --token - --ca-hash sha256:3f…

  # The token from a file the operator's provisioning placed, not on the command line:
  nodusd enroll --server https://nodus.example:8443 --token - --ca-hash sha256:3f… < /run/nodus/enrollment-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token, err := enrollmentToken(o.Token, cmd.InOrStdin())
			if err != nil {
				return err
			}
			o.Token = token
			if o.Node == "" {
				host, err := os.Hostname()
				if err != nil {
					return err
				}
				o.Node = host
			}
			gen, err := agent.Enroll(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enrolled as node %s (agent generation %d); credential in %s\n", o.Node, gen, o.StateDir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Server, "server", "", "nodus-server URL, or the comma-separated URLs of several replicas (the agent moves to the next when one fails)")
	f.StringVar(&o.Token, "token", "", "enrollment token; - reads it from stdin (default $"+enrollmentTokenEnv+")")
	f.StringVar(&o.CAFile, "ca-file", "", "the server CA certificate to trust")
	f.StringVar(&o.CAHash, "ca-hash", "", "the server CA's fingerprint (sha256:HEX), printed with the token")
	f.StringVar(&o.Node, "name", "", "node name (default: the hostname)")
	f.StringVar(&o.StateDir, "state-dir", o.StateDir, "where the credential and state live")
	return cmd
}

// enrollmentTokenEnv holds the enrollment token when --token is not given.
const enrollmentTokenEnv = "NODUSD_ENROLLMENT_TOKEN"

// maxEnrollmentToken bounds what is read from stdin for --token -: a token
// is a few dozen bytes.
const maxEnrollmentToken = 64 << 10

// enrollmentToken is the token --token gives: as it is, the first line of
// stdin for "-", else $NODUSD_ENROLLMENT_TOKEN.
func enrollmentToken(flag string, stdin io.Reader) (string, error) {
	token := flag
	switch flag {
	case "-":
		if in, ok := stdin.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
			// Pasted at a terminal, as nodus pools token's line asks:
			// say what is read, and show nothing of it.
			fmt.Fprint(os.Stderr, "enrollment token: ")
			typed, err := term.ReadPassword(int(in.Fd()))
			fmt.Fprintln(os.Stderr)
			if err != nil {
				return "", fmt.Errorf("reading the enrollment token: %w", err)
			}
			stdin = strings.NewReader(string(typed))
		}
		line, err := bufio.NewReader(io.LimitReader(stdin, maxEnrollmentToken+1)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("reading the enrollment token from stdin: %w", err)
		}
		if len(line) > maxEnrollmentToken {
			return "", errors.New("--token -: stdin holds no token: its first line is longer than 64 KiB")
		}
		token = line
	case "":
		token = os.Getenv(enrollmentTokenEnv)
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", fmt.Errorf("give the enrollment token: --token TOKEN, --token - to read it from stdin, or $%s", enrollmentTokenEnv)
	}
	return token, nil
}

func runCommand() *cobra.Command {
	o := agent.Options{StateDir: "/var/lib/nodusd", SSHHostKey: "/etc/ssh/ssh_host_ed25519_key.pub", DiskPath: "/", Grace: 5 * time.Second}
	var config, servers string
	cmd := &cobra.Command{
		Use:   "run [--config FILE]",
		Short: "Run the agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config != "" {
				data, err := os.ReadFile(config)
				if err != nil {
					return err
				}
				if err := yaml.UnmarshalStrict(data, &fileConfig{&o}); err != nil {
					return fmt.Errorf("%s: %w", config, err)
				}
			}
			if servers != "" {
				list, err := failover.Servers(servers)
				if err != nil {
					return fmt.Errorf("--server: %w", err)
				}
				o.Servers = list
			}
			o.Version = version
			a, err := agent.New(o)
			if err != nil {
				return err
			}
			ctx, stop := shutdownsignal.Context(cmd.Context(), "nodusd", cmd.ErrOrStderr())
			defer stop()
			return a.Run(ctx)
		},
	}
	cmd.SetContext(context.Background())
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "YAML file with stateDir, sshHostKey, sshAddress, diskPath, grace, borrowerUser, borrowerSlots, sandbox, imagesDir, executionsDir, cleanCommand and cleanTimeout; its values override the flags")
	f.StringVar(&o.StateDir, "state-dir", o.StateDir, "where the credential and state live")
	f.StringVar(&servers, "server", "", "comma-separated nodus-server replica URLs to use instead of those given at enrollment")
	f.StringVar(&o.SSHHostKey, "ssh-host-key", o.SSHHostKey, "sshd host public key reported for strict host checking")
	f.StringVar(&o.SSHAddress, "ssh-address", o.SSHAddress, "host:port where customers reach this host's sshd")
	f.StringVar(&o.DiskPath, "disk-path", o.DiskPath, "filesystem whose free space is reported")
	f.DurationVar(&o.Grace, "grace", o.Grace, "time between SIGTERM and SIGKILL when access is retired")
	f.StringVar(&o.Socket, "socket", o.Socket, "unix socket for `nodusd principals` (default STATE-DIR/agent.sock)")
	f.StringVar(&o.SSHDCAFile, "sshd-ca-file", o.SSHDCAFile, "write the server's SSH user CA key here, for sshd's TrustedUserCAKeys")
	f.StringVar(&o.BorrowerUser, "borrower-user", agent.DefaultBorrowerUser, "unprivileged account borrowers' executions run as (never the owner's login user)")
	f.IntVar(&o.BorrowerSlots, "borrower-slots", 0, "when above 0, run each execution as an account of its own: BORROWER-USER-0 … BORROWER-USER-(N-1); at most N at once")
	f.StringVar(&o.Sandbox, "sandbox", agent.SandboxRunc, `how borrowers' executions are isolated: "runc" (an OCI sandbox: own namespaces, read-only system, no capabilities, only its GPUs) or "none" (a plain process of the borrower account: no isolation, development only)`)
	f.StringVar(&o.ImagesDir, "images-dir", agent.DefaultImagesDir, "OCI images executions may name (--image NAME[:TAG]): layout directories NAME/ or archives NAME.tar, unpacked with umoci")
	f.StringVar(&o.ExecutionsDir, "executions-dir", agent.DefaultExecutionsDir, "where executions' work directories are made and removed (root's, 0700; 0711 with --sandbox none, for the borrower account to reach its own); its real path, on a way no other account owns or can write (sticky directories aside)")
	f.StringVar(&o.SSHDDropIn, "sshd-drop-in", o.SSHDDropIn, "write the sshd configuration for Nodus access here (e.g. /etc/ssh/sshd_config.d/nodus.conf); reload sshd once after the first start")
	f.StringVar(&o.LoginGroup, "login-group", agent.DefaultLoginGroup, "group of the login users Nodus manages; the sshd drop-in accepts only Nodus certificates for its members")
	f.StringVar(&o.CleanCommand, "clean-command", "", "the operator's own handover step, run by /bin/sh -c after a tenant's login account is reset (e.g. wipe scratch disks, reset GPUs, re-image); it must exit 0 for the node to be available again")
	f.DurationVar(&o.CleanTimeout, "clean-timeout", 30*time.Minute, "how long --clean-command may run before it is killed and the cleaning fails")
	return cmd
}

func principalsCommand() *cobra.Command {
	socket := "/var/lib/nodusd/agent.sock"
	cmd := &cobra.Command{
		Use:   "principals LOGIN-USER",
		Short: "Print the SSH principals LOGIN-USER may log in with now (sshd's AuthorizedPrincipalsCommand)",
		// What --sshd-drop-in writes: with its Match block, certificates are
		// the only way in for login users, so a key a tenant added to
		// ~/.ssh/authorized_keys does not outlive its access.
		Example: "  # /etc/ssh/sshd_config.d/nodus.conf (nodusd --sshd-drop-in writes it)\n" + indent(
			agent.DropIn("/etc/ssh/nodus_user_ca.pub", "/usr/local/bin/nodusd", socket, agent.DefaultLoginGroup)),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return agent.Principals(socket, args[0], cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&socket, "socket", socket, "the running nodusd's socket")
	return cmd
}

// indent indents text for cobra's Example.
func indent(text string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i, line := range lines {
		if line != "" {
			lines[i] = "  " + line
		}
	}
	return strings.Join(lines, "\n")
}

// fileConfig maps the YAML config file onto the options.
type fileConfig struct{ o *agent.Options }

func (f *fileConfig) UnmarshalJSON(data []byte) error {
	var c struct {
		StateDir   *string `json:"stateDir"`
		SSHHostKey *string `json:"sshHostKey"`
		SSHAddress *string `json:"sshAddress"`
		DiskPath   *string `json:"diskPath"`
		Grace      *string `json:"grace"`
		// Borrower executions.
		BorrowerUser  *string `json:"borrowerUser"`
		BorrowerSlots *int    `json:"borrowerSlots"`
		ExecutionsDir *string `json:"executionsDir"`
		Sandbox       *string `json:"sandbox"`
		ImagesDir     *string `json:"imagesDir"`
		// Handover cleaning.
		CleanCommand *string `json:"cleanCommand"`
		CleanTimeout *string `json:"cleanTimeout"`
	}
	if err := strictJSON(data, &c); err != nil {
		return err
	}
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&f.o.StateDir, c.StateDir)
	set(&f.o.SSHHostKey, c.SSHHostKey)
	set(&f.o.SSHAddress, c.SSHAddress)
	set(&f.o.DiskPath, c.DiskPath)
	set(&f.o.BorrowerUser, c.BorrowerUser)
	if c.BorrowerSlots != nil {
		if *c.BorrowerSlots < 0 {
			return fmt.Errorf("borrowerSlots must not be negative")
		}
		f.o.BorrowerSlots = *c.BorrowerSlots
	}
	set(&f.o.ExecutionsDir, c.ExecutionsDir)
	set(&f.o.Sandbox, c.Sandbox)
	set(&f.o.ImagesDir, c.ImagesDir)
	set(&f.o.CleanCommand, c.CleanCommand)
	if c.CleanTimeout != nil {
		d, err := time.ParseDuration(*c.CleanTimeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("cleanTimeout: %q is not a positive duration", *c.CleanTimeout)
		}
		f.o.CleanTimeout = d
	}
	if c.Grace != nil {
		d, err := time.ParseDuration(*c.Grace)
		if err != nil {
			return fmt.Errorf("grace: %w", err)
		}
		f.o.Grace = d
	}
	return nil
}
