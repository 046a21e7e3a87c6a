package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// executionsCommand is the borrower's side of lending: submit, list, show
// and cancel executions on capacity lent in a pool.
func executionsCommand(g *Globals, s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "executions", Short: "Your project's executions on lent capacity"}
	var project, pool string
	var gpus int32
	var maxRuntime int64
	var env []string
	run := &cobra.Command{
		Use:     "run -n PROJECT --pool POOL [--gpus N] [--max-runtime SECONDS] -- COMMAND [ARGS...]",
		Short:   "Submit an execution",
		Example: "  nodus executions run -n acme --pool fra1 --gpus 2 -- python train.py --epochs 3",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if project == "" || pool == "" {
				return usageError(fmt.Errorf("say which project (-n) and pool (--pool)"))
			}
			e := &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{GenerateName: "run-"},
				Spec: nodusv1.ExecutionSpec{Pool: pool, Command: args, GPUs: gpus, MaxRuntimeSeconds: maxRuntime}}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return usageError(fmt.Errorf("--env %q is not NAME=VALUE", kv))
				}
				e.Spec.Env = append(e.Spec.Env, nodusv1.ExecutionEnv{Name: k, Value: v})
			}
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			created, err := c.NodusV1().Executions(project).Create(cmd.Context(), e, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "execution %s/%s submitted (%s)\n", project, created.Name, created.Status.Phase)
			return nil
		},
	}
	run.Flags().StringVarP(&project, "project", "n", "", "your project")
	run.Flags().StringVar(&pool, "pool", "", "the pool to borrow from")
	run.Flags().Int32Var(&gpus, "gpus", 1, "GPUs wanted")
	run.Flags().Int64Var(&maxRuntime, "max-runtime", 3600, "seconds after which it is ended")
	run.Flags().StringArrayVar(&env, "env", nil, "NAME=VALUE")

	list := &cobra.Command{
		Use: "list -n PROJECT", Short: "List executions", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if project == "" {
				return usageError(fmt.Errorf("say which project (-n PROJECT)"))
			}
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			l, err := c.NodusV1().Executions(project).List(cmd.Context(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			return printExecutions(s, l.Items)
		},
	}
	list.Flags().StringVarP(&project, "project", "n", "", "your project")
	get := &cobra.Command{
		Use: "get PROJECT/NAME", Short: "Show an execution", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, name, err := splitRef(args[0])
			if err != nil {
				return err
			}
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			e, err := c.NodusV1().Executions(p).Get(cmd.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return printExecutions(s, []nodusv1.Execution{*e})
		},
	}
	cancel := &cobra.Command{
		Use: "cancel PROJECT/NAME", Short: "Cancel an execution", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, name, err := splitRef(args[0])
			if err != nil {
				return err
			}
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			if err := c.NodusV1().Executions(p).Delete(cmd.Context(), name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "execution %s cancelled\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(run, list, get, cancel)
	return cmd
}

func printExecutions(s Streams, items []nodusv1.Execution) error {
	w := tabwriter.NewWriter(s.Out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(w, "EXECUTION\tPHASE\tPOOL\tGPUS\tHOST\tCOMMAND")
	for _, e := range items {
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%d\t%s\t%s\n", e.Namespace, e.Name, e.Status.Phase, e.Spec.Pool, e.Spec.GPUs,
			dash(e.Status.Host), strings.Join(e.Spec.Command, " "))
	}
	return w.Flush()
}
