package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// ReleaseOptions are `nodus release`'s.
type ReleaseOptions struct {
	*Globals
	Streams
	Yes, DryRun, Wait bool
	Timeout           time.Duration
	Attempts          int
}

func newReleaseCommand(g *Globals, s Streams) *cobra.Command {
	o := &ReleaseOptions{Globals: g, Streams: s, Timeout: 10 * time.Minute, Attempts: 5}
	cmd := &cobra.Command{
		Use:   "release PROJECT/NAME",
		Short: "Retire your access to a host and drain its lending, for good",
		Long: "Release capacity: your project's access to the host ends and lending drains, irreversibly.\n" +
			"The reservation term is not shortened.",
		Example:           "  nodus release acme/gpu-001\n  nodus release acme/gpu-001 --yes --wait",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeHosts(g),
		RunE:              func(cmd *cobra.Command, args []string) error { return o.Run(cmd.Context(), args[0]) },
	}
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "check everything, change nothing")
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "wait until the host's agent confirms that nothing runs any more")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "how long --wait waits")
	return cmd
}

// Run shows what will happen, confirms, releases and optionally waits.
func (o *ReleaseOptions) Run(ctx context.Context, ref string) error {
	c, h, err := o.host(ctx, ref)
	if err != nil {
		return err
	}
	project, name := h.Namespace, h.Name
	r := h.Status.Reservation
	fmt.Fprintf(o.Out, "Release %s/%s\n  term:   %s until %s (unchanged by a release)\n  epoch:  %d\n  state:  %s\n",
		project, name, r.StartsAt.UTC().Format(time.RFC3339), r.EndsAt.UTC().Format(time.RFC3339), r.Epoch, oneLine(r.State))
	fmt.Fprintln(o.Out, "Your project's access to this host ends and its lending drains. This cannot be undone.")
	// A host already released is not asked about: the server says so, with
	// its fix (AlreadyReleased).
	alreadyReleased := r.State == nodusv1.ReservationStateReleasing || r.State == nodusv1.ReservationStateReleased
	if !o.Yes && !o.DryRun && !alreadyReleased {
		// On stderr: with stdout sent to a file, the question still shows.
		fmt.Fprintf(o.Err, "Type the host name (%s) to release it: ", name)
		line, _ := bufio.NewReader(o.In).ReadString('\n')
		if strings.TrimSpace(line) != name {
			return usageError(errors.New("not confirmed; nothing was released (type the host's name when asked, or pass --yes)"))
		}
		// The host is written while a person reads (a heartbeat kept, a
		// condition): its ETag moves, and the release would be refused
		// with 412 though nothing shown changed. What was shown is what
		// is agreed to: read again, it is released if that is unchanged.
		if h, err = stillAsShown(ctx, c, h); err != nil {
			return err
		}
	}
	agreed, epoch := true, r.Epoch
	opts := metav1.CreateOptions{}
	if o.DryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	released := &nodusv1.ReservedHost{}
	if err := postHostAction(ctx, h, "release-capacity", o.Attempts, o.Err, func(ctx context.Context) (err error) {
		released, err = c.NodusV1().ReservedHosts(project).ReleaseCapacity(ctx, name,
			&nodusv1.ReservedHostReleaseRequest{Agreed: &agreed, Epoch: &epoch}, opts)
		return err
	}); err != nil {
		// --wait is for a host released and drained: one released before
		// (by a run whose wait ran out) is waited for as it is.
		if o.Wait && !o.DryRun && apierrors.ReasonForError(err) == apierror.ReasonAlreadyReleased {
			fmt.Fprintf(o.Out, "%s/%s was already released\n", project, name)
			return o.waitDrained(ctx, project, name)
		}
		return err
	}
	if o.DryRun {
		fmt.Fprintf(o.Out, "dry run: would release %s/%s (epoch %d → %d); nothing changed\n", project, name, r.Epoch, released.Status.Reservation.Epoch)
		return nil
	}
	fmt.Fprintf(o.Out, "released %s/%s at epoch %d\n", project, name, released.Status.Reservation.Epoch)
	if !o.Wait {
		return nil
	}
	return o.waitDrained(ctx, project, name)
}

// stillAsShown reads shown's host again and returns it if what the
// confirmation showed (the term, the epoch, the state, the object itself)
// is unchanged.
func stillAsShown(ctx context.Context, c versioned.Interface, shown *nodusv1.ReservedHost) (*nodusv1.ReservedHost, error) {
	now, err := c.NodusV1().ReservedHosts(shown.Namespace).Get(ctx, shown.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	was, is := shown.Status.Reservation, now.Status.Reservation
	if now.UID != shown.UID || is.Epoch != was.Epoch || is.State != was.State || !is.StartsAt.Equal(&was.StartsAt) || !is.EndsAt.Equal(&was.EndsAt) {
		return nil, apierrors.NewConflict(nodusv1.Resource("reservedhosts"), shown.Name,
			fmt.Errorf("it changed while you confirmed (now epoch %d, state %s, until %s); nothing was released: run nodus release again to see it as it is",
				is.Epoch, oneLine(is.State), is.EndsAt.UTC().Format(time.RFC3339)))
	}
	return now, nil
}

func (o *ReleaseOptions) waitDrained(ctx context.Context, project, name string) error {
	c, _, err := o.Client()
	if err != nil {
		return err
	}
	start := time.Now()
	notDrained := func() error {
		return refuseWithFix(reasonNotDrained, fmt.Errorf("released, but not drained after %s: the host's agent has not confirmed yet that nothing runs", o.Timeout),
			fmt.Sprintf("The release is recorded and stays. Wait longer: `nodus release %s/%s --wait --timeout 30m` waits again and releases nothing twice; if it does not drain, ask your operator whether the host's agent is connected.", project, name))
	}
	// --timeout bounds the whole wait, a read the server does not answer
	// included; a timeout of none looks once.
	waiting, cancel := ctx, context.CancelFunc(func() {})
	if o.Timeout > 0 {
		waiting, cancel = context.WithDeadline(ctx, start.Add(o.Timeout))
	}
	defer cancel()
	for {
		h, err := c.NodusV1().ReservedHosts(project).Get(waiting, name, metav1.GetOptions{})
		if err != nil {
			// The wait ran out: its context says so once its timer fired;
			// before that, a deadline just passed reaches the client's rate
			// limiter first, which answers "would exceed context deadline"
			// and wraps no context error. (It answers so ahead of the
			// deadline too when it would have to wait past it, which one
			// read a second under its default rate never does.)
			if ctx.Err() == nil && (waiting.Err() != nil || o.Timeout > 0 && time.Since(start) >= o.Timeout) {
				return notDrained()
			}
			return err
		}
		if rel := h.Status.Release; rel != nil && rel.DrainedAt != nil {
			fmt.Fprintf(o.Out, "drained after %s: no session or execution runs on the host any more\n", time.Since(start).Round(time.Second))
			return nil
		}
		if time.Since(start) >= o.Timeout {
			return notDrained()
		}
		fmt.Fprintf(o.Out, "waiting for the host's agent to confirm that sessions and executions ended (%s)\n", time.Since(start).Round(time.Second))
		select {
		case <-waiting.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return notDrained()
		case <-time.After(time.Second):
		}
	}
}

// isAPIError says whether the server answered; otherwise the connection failed.
func isAPIError(err error) bool {
	var s apierrors.APIStatus
	return errors.As(err, &s) && s.Status().Code != 0
}

func reasonIs(err error, reason string) bool {
	var s apierrors.APIStatus
	return errors.As(err, &s) && string(s.Status().Reason) == reason
}
