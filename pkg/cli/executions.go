package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/terminalsafe"
)

// executionsCommand is the borrower's side of lending: submit, list, show
// and cancel executions on capacity lent in a pool.
func executionsCommand(g *Globals, s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "executions", Short: "Your project's executions on lent capacity"}
	var project, pool, image string
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
			e := &nodusv1.Execution{Spec: nodusv1.ExecutionSpec{Pool: pool, Command: args, GPUs: gpus, MaxRuntimeSeconds: maxRuntime, Image: image}}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					// --env NAME: the value is this shell's, kept off the
					// command line (ps, the shell's history), as docker's -e.
					if v, ok = os.LookupEnv(kv); !ok {
						return usageError(fmt.Errorf("--env %q is neither NAME=VALUE nor the name of a variable set here", oneLine(kv)))
					}
				}
				e.Spec.Env = append(e.Spec.Env, nodusv1.ExecutionEnv{Name: k, Value: v})
			}
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			created, err := submitExecution(cmd.Context(), c, project, e, submitAttempts, s.Err)
			if err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "execution %s/%s submitted (%s)\n", project, oneLine(created.Name), oneLine(created.Status.Phase))
			return nil
		},
	}
	run.Flags().StringVarP(&project, "project", "n", "", "your project")
	run.Flags().StringVar(&pool, "pool", "", "the pool to borrow from")
	run.Flags().Int32Var(&gpus, "gpus", 1, "GPUs wanted")
	run.Flags().Int64Var(&maxRuntime, "max-runtime", 3600, "seconds after which it is ended")
	run.Flags().StringArrayVar(&env, "env", nil, "NAME=VALUE, or NAME to pass this shell's value (kept off the command line, which every local user sees)")
	run.Flags().StringVar(&image, "image", "", "an OCI image of the hosts' images directory, NAME[:TAG], as the sandbox's root (default: the host's system, read-only)")

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
			if done, err := structured(g.Output, s.Out, executionObjects(l.Items)...); done {
				return err
			}
			return printExecutions(s, l.Items)
		},
	}
	list.Flags().StringVarP(&project, "project", "n", "", "your project")
	get := &cobra.Command{
		Use: "get PROJECT/NAME", Short: "Show an execution", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, p, name, err := g.clientFor(args[0])
			if err != nil {
				return err
			}
			e, err := c.NodusV1().Executions(p).Get(cmd.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if done, err := structured(g.Output, s.Out, executionObjects([]nodusv1.Execution{*e})...); done {
				return err
			}
			if err := printExecutions(s, []nodusv1.Execution{*e}); err != nil {
				return err
			}
			printExecutionDetail(s, e)
			return nil
		},
	}
	cancel := &cobra.Command{
		Use: "cancel PROJECT/NAME", Short: "Cancel an execution (its record is kept)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, p, name, err := g.clientFor(args[0])
			if err != nil {
				return err
			}
			e, err := c.NodusV1().Executions(p).Cancel(cmd.Context(), name, &nodusv1.ExecutionCancelRequest{}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if e.Status.Phase == nodusv1.ExecutionCancelled {
				fmt.Fprintf(s.Out, "execution %s cancelled\n", args[0])
			} else {
				fmt.Fprintf(s.Out, "execution %s is being stopped (TERM, then KILL after the host's grace period)\n", args[0])
			}
			return nil
		},
	}
	var follow, raw bool
	logs := &cobra.Command{
		Use: "logs PROJECT/NAME [-f]", Short: "Print an execution's output (its last 256 KiB)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, p, name, err := g.clientFor(args[0])
			if err != nil {
				return err
			}
			out := s
			if !raw {
				safe := &outputSafe{w: s.Out}
				defer safe.end()
				out.Out = safe
			}
			// Ctrl-C is how logs -f usually ends: it ends here, so that the
			// colours the output left set are reset (end) before nodus exits.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			err = followLogs(ctx, c, out, p, name, follow)
			if ctx.Err() != nil && cmd.Context().Err() == nil {
				return nil
			}
			return err
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output until the execution ends")
	logs.Flags().BoolVar(&raw, "raw", false, "print the output's bytes as kept, escape sequences included (for a file, not a terminal)")
	cmd.AddCommand(run, list, get, cancel, logs)
	return cmd
}

// outputSafe writes an execution's output for a terminal. The output comes
// from the agent of the host it ran on, another tenant's machine: every
// control character is shown as \xNN, and Unicode's direction controls as
// \uNNNN, but line breaks, tabs, carriage returns (progress bars) and
// colours (SGR sequences, which only style text). A character or colour
// sequence cut between two writes (logs -f prints what each poll brings,
// cut anywhere) waits for the rest in the next; one never finished is
// shown escaped at the end. Colours can still hide text (the same colour
// for text and background); what they cannot do is outlast the output:
// end resets them.
type outputSafe struct {
	w      io.Writer
	styled bool // an SGR sequence other than a reset was written last
	// cut is the start of a character or SGR sequence at the end of the
	// last write, kept for the next.
	cut []byte
}

// sgrStart is a beginning of an SGR sequence that may yet be one.
var sgrStart = regexp.MustCompile(`^\x1b(\[[0-9;]{0,32})?$`)

// cutTail is how many bytes at the end of p begin a character or an SGR
// sequence that p does not finish.
func cutTail(p []byte) int {
	if i := bytes.LastIndexByte(p, 0x1b); i >= 0 && len(p)-i <= 34 && sgrStart.Match(p[i:]) {
		return len(p) - i
	}
	for k := 1; k <= utf8.UTFMax-1 && k <= len(p); k++ {
		if start := len(p) - k; utf8.RuneStart(p[start]) {
			if !utf8.FullRune(p[start:]) {
				return k
			}
			break
		}
	}
	return 0
}

// sgr is one Select Graphic Rendition sequence: ESC [ parameters m.
var sgr = regexp.MustCompile(`^\x1b\[[0-9;]{0,32}m`)

// sgrReset is the SGR sequence that ends every style.
const sgrReset = "\x1b[0m"

func (o *outputSafe) Write(p []byte) (int, error) {
	written := len(p)
	if len(o.cut) > 0 {
		p = append(o.cut, p...)
		o.cut = nil
	}
	if k := cutTail(p); k > 0 {
		o.cut = append([]byte(nil), p[len(p)-k:]...)
		p = p[:len(p)-k]
	}
	if err := o.write(p); err != nil {
		return 0, err
	}
	return written, nil
}

// write escapes p and writes it.
func (o *outputSafe) write(p []byte) error {
	var b bytes.Buffer
	for i := 0; i < len(p); {
		if m := sgr.Find(p[i:]); m != nil {
			b.Write(m)
			o.styled = string(m) != sgrReset && string(m) != "\x1b[m"
			i += len(m)
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == '\n' || r == '\t' || r == '\r':
			b.WriteByte(byte(r))
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, p[i])
		case terminalsafe.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case terminalsafe.IsDirectionControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.Write(p[i : i+size])
		}
		i += size
	}
	_, err := o.w.Write(b.Bytes())
	return err
}

// end resets the terminal's style if the output left one set, so that it
// does not colour (or hide) what the shell prints next.
func (o *outputSafe) end() {
	if len(o.cut) > 0 {
		// Never finished: shown escaped, as any broken sequence.
		_ = o.write(o.cut)
		o.cut = nil
	}
	if o.styled {
		_, _ = io.WriteString(o.w, sgrReset)
		o.styled = false
	}
}

// followLogs prints the log, and with follow the output that comes after it
// until the execution ends. Output the server no longer keeps is skipped.
func followLogs(ctx context.Context, c versioned.Interface, s Streams, project, name string, follow bool) error {
	var printed int64 // bytes of the whole output printed so far
	for {
		e, err := c.NodusV1().Executions(project).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		raw, err := readLog(ctx, c, project, name)
		if err != nil {
			return err
		}
		dropped, data := nodusv1.SplitExecutionLog(raw)
		switch start := printed - dropped; {
		case printed == 0 && dropped > 0:
			_, _ = s.Out.Write(nodusv1.ExecutionLogBody(dropped, data)) // the server's note, then the output
		case start < 0:
			fmt.Fprintf(s.Out, "[nodus: %d bytes of output were not kept]\n", -start)
			_, _ = s.Out.Write(data)
		case start < int64(len(data)):
			_, _ = s.Out.Write(data[start:])
		}
		printed = dropped + int64(len(data))
		if !follow || e.Status.Phase.Finished() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// maxLogAnswer bounds a log answer: the output a server keeps, its note on
// output it dropped, and room to spare. A server that sends more is not
// one to believe (or read into memory).
const maxLogAnswer = nodusv1.MaxExecutionLogBytes + 4<<10

// readLog reads the execution's log as the server keeps it, at most
// maxLogAnswer bytes of it.
func readLog(ctx context.Context, c versioned.Interface, project, name string) ([]byte, error) {
	stream, err := c.NodusV1().RESTClient().Get().Namespace(project).Resource("executions").Name(name).SubResource("log").Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	raw, err := io.ReadAll(io.LimitReader(stream, maxLogAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxLogAnswer {
		return nil, refuseWithFix(reasonAnswerTooLarge, fmt.Errorf("refusing the log of %s/%s: the server sent more output than it keeps (%d KiB)", project, name, nodusv1.MaxExecutionLogBytes>>10),
			"Tell your operator: a nodus-server keeps at most this much of an execution's output, so the server, or something between it and you, is at fault.")
	}
	return raw, nil
}

func printExecutionDetail(s Streams, e *nodusv1.Execution) {
	st := e.Status
	if st.Reason != "" || st.Message != "" {
		// One line: the message is the lent host's agent's, another tenant's.
		fmt.Fprintf(s.Out, "reason:   %s: %s\n", oneLine(dash(st.Reason)), oneLine(st.Message))
	}
	if len(st.GPUIndices) > 0 {
		fmt.Fprintf(s.Out, "gpus:     %v\n", st.GPUIndices)
	}
	if st.StartedAt != nil {
		fmt.Fprintf(s.Out, "started:  %s\n", st.StartedAt.UTC().Format(time.RFC3339))
	}
	if st.FinishedAt != nil {
		fmt.Fprintf(s.Out, "finished: %s\n", st.FinishedAt.UTC().Format(time.RFC3339))
	}
	if st.ExitCode != nil {
		fmt.Fprintf(s.Out, "exit:     %d\n", *st.ExitCode)
	}
}

func printExecutions(s Streams, items []nodusv1.Execution) error {
	w := tabwriter.NewWriter(s.Out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(w, "EXECUTION\tPHASE\tPOOL\tGPUS\tHOST\tCOMMAND")
	for _, e := range items {
		writeRow(w, e.Namespace+"/"+e.Name, e.Status.Phase, e.Spec.Pool, e.Spec.GPUs, dash(e.Status.Host), strings.Join(e.Spec.Command, " "))
	}
	return w.Flush()
}

// executionObjects are executions as -o json and yaml print them, with
// their kind.
func executionObjects(items []nodusv1.Execution) []interface{} {
	out := make([]interface{}, len(items))
	for i := range items {
		items[i].APIVersion, items[i].Kind = nodusv1.SchemeGroupVersion.String(), "Execution"
		out[i] = &items[i]
	}
	return out
}
