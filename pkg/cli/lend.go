package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// LendOptions are `nodus lend`'s and `nodus withdraw`'s.
type LendOptions struct {
	*Globals
	Streams
	Withdraw      bool
	GPUs          int32
	MaxExecutions int32
	// Memory and CPUs, as Kubernetes quantities ("32Gi", "8", "500m").
	Memory, CPUs string
	Attempts     int
}

func newLendCommand(g *Globals, s Streams) *cobra.Command {
	o := &LendOptions{Globals: g, Streams: s, GPUs: -1, Attempts: 5}
	cmd := &cobra.Command{
		Use:   "lend PROJECT/NAME [--gpus N] [--max-executions N] [--memory SIZE] [--cpus N]",
		Short: "Lend an idle host into its pool, or change what you lend",
		Long: "Lend the host's idle capacity to the projects its pool lends to. Borrowers' executions run as\n" +
			"their own account in a sandbox, with only the GPUs they are given and a share of the memory and CPUs\n" +
			"you lend (by default in proportion to the GPUs lent); your access to the host is unchanged.\n" +
			"`nodus withdraw` takes the host back: running executions are drained.",
		Example:           "  nodus lend acme/gpu-001 --gpus 4 --memory 512Gi --cpus 48\n  nodus withdraw acme/gpu-001",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeHosts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("gpus") && o.GPUs < 0 {
				return usageError(fmt.Errorf("--gpus must not be negative"))
			}
			if cmd.Flags().Changed("max-executions") && o.MaxExecutions < 1 {
				return usageError(fmt.Errorf("--max-executions must be at least 1"))
			}
			return o.Run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().Int32Var(&o.GPUs, "gpus", o.GPUs, "GPUs borrowers may use at once (default: all of the host's)")
	cmd.Flags().Int32Var(&o.MaxExecutions, "max-executions", 0, "executions at once (default: one per lent GPU, at least one)")
	cmd.Flags().StringVar(&o.Memory, "memory", "", "memory borrowers' executions use together, e.g. 512Gi (default: the host's, in proportion to the GPUs lent)")
	cmd.Flags().StringVar(&o.CPUs, "cpus", "", "CPUs borrowers' executions use together, e.g. 48 or 0.5 (default: in proportion to the GPUs lent)")
	return cmd
}

func newWithdrawCommand(g *Globals, s Streams) *cobra.Command {
	o := &LendOptions{Globals: g, Streams: s, Withdraw: true, Attempts: 5}
	return &cobra.Command{
		Use:               "withdraw PROJECT/NAME",
		Short:             "Stop lending a host; borrowers' executions on it are drained",
		Example:           "  nodus withdraw acme/gpu-001",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeHosts(g),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.Run(cmd.Context(), args[0]) },
	}
}

// Run lends or withdraws under the epoch and version just read, with one
// Idempotency-Key for every retry.
func (o *LendOptions) Run(ctx context.Context, ref string) error {
	c, h, err := o.host(ctx, ref)
	if err != nil {
		return err
	}
	epoch := h.Status.Reservation.Epoch
	hosts := c.NodusV1().ReservedHosts(h.Namespace)
	out := &nodusv1.HostLending{}
	action, send := "withdraw", func(ctx context.Context) (err error) {
		out, err = hosts.Withdraw(ctx, h.Name, &nodusv1.ReservedHostWithdrawRequest{Epoch: &epoch}, metav1.CreateOptions{})
		return err
	}
	if !o.Withdraw {
		req := &nodusv1.ReservedHostLendRequest{Epoch: &epoch}
		if o.GPUs >= 0 {
			gpus := int32(o.GPUs)
			req.MaxGPUs = &gpus
		}
		if o.MaxExecutions > 0 {
			executions := int32(o.MaxExecutions)
			req.MaxExecutions = &executions
		}
		if o.Memory != "" {
			q, err := resource.ParseQuantity(o.Memory)
			if err != nil || q.Sign() <= 0 {
				return usageError(fmt.Errorf("--memory %q is not a size such as 64Gi", o.Memory))
			}
			mib := q.Value() >> 20
			req.MemoryMiB = &mib
		}
		if o.CPUs != "" {
			q, err := resource.ParseQuantity(o.CPUs)
			if err != nil || q.Sign() <= 0 {
				return usageError(fmt.Errorf("--cpus %q is not a number of CPUs such as 8 or 0.5", o.CPUs))
			}
			milli := q.MilliValue()
			req.MilliCPUs = &milli
		}
		action, send = "lend", func(ctx context.Context) (err error) {
			out, err = hosts.Lend(ctx, h.Name, req, metav1.CreateOptions{})
			return err
		}
	}
	if err := postHostAction(ctx, h, action, o.Attempts, o.Err, send); err != nil {
		return err
	}
	l := out.Status
	if o.Withdraw {
		fmt.Fprintf(o.Out, "withdrew %s/%s from lending; %d borrower executions drain\n", h.Namespace, h.Name, l.Executions)
		return nil
	}
	fmt.Fprintf(o.Out, "lent %s/%s into pool %s: up to %d GPUs and %d executions at once, %s of memory and %s CPUs together\n",
		h.Namespace, h.Name, oneLine(l.Pool), l.MaxGPUs, l.MaxExecutions, quantity(l.MemoryMiB<<20, resource.BinarySI), quantity(l.MilliCPUs, resource.DecimalSI))
	return nil
}

func newLendingCommand(g *Globals, s Streams) *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:     "lending -n PROJECT",
		Short:   "How your hosts are lent and how much of them is borrowed now",
		Example: "  nodus lending -n acme",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if project == "" {
				return usageError(fmt.Errorf("say which project (-n PROJECT)"))
			}
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			l, err := c.NodusV1().HostLendings(project).List(cmd.Context(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			objects := make([]interface{}, len(l.Items))
			for i := range l.Items {
				l.Items[i].APIVersion, l.Items[i].Kind = nodusv1.SchemeGroupVersion.String(), "HostLending"
				objects[i] = &l.Items[i]
			}
			if done, err := structured(g.Output, s.Out, objects...); done {
				return err
			}
			w := tabwriter.NewWriter(s.Out, 0, 0, 3, ' ', 0)
			fmt.Fprintln(w, "HOST\tSTATE\tPOOL\tBORROWED GPUS\tEXECUTIONS\tBORROWERS")
			for _, x := range l.Items {
				var who []string
				for _, b := range x.Status.Borrowers {
					who = append(who, fmt.Sprintf("%s (%d GPUs)", b.Project, b.GPUs))
				}
				writeRow(w, x.Namespace+"/"+x.Name, x.Status.State, dash(x.Status.Pool),
					fmt.Sprintf("%d/%d", x.Status.BorrowedGPUs, x.Status.MaxGPUs), fmt.Sprintf("%d/%d", x.Status.Executions, x.Status.MaxExecutions),
					dash(strings.Join(who, ", ")))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVarP(&project, "project", "n", "", "your project")
	return cmd
}

// quantity renders n (bytes, or thousandths of a CPU with DecimalSI) for people.
func quantity(n int64, format resource.Format) string {
	if format == resource.DecimalSI {
		return resource.NewMilliQuantity(n, format).String()
	}
	return resource.NewQuantity(n, format).String()
}
