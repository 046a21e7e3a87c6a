package executions

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	apioutcome "github.com/nodus-dev/nodus/pkg/outcome"
)

// report sends the final outcome, retrying while the server cannot be
// reached or fails (a 5xx, a 408, a 429), until it takes the report or refuses it
// (the execution moved on, or the report is not acceptable). A refusal is
// final: the same report would be refused again, and the run, with its
// GPUs on this host, is held until report returns.
func (r *Runner) report(ctx context.Context, namespace, name string, uid types.UID, o outcome, log string, dropped int64) {
	rep := &nodusv1.ExecutionReport{Phase: o.phase, Reason: o.reason, Message: fitMessage(o.message), ExitCode: o.exit, Log: log, LogDroppedBytes: dropped}
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		_, err := r.post(ctx, namespace, name, uid, rep)
		if err == nil || apioutcome.Final(err) {
			if err != nil {
				klog.InfoS("execution report refused", "execution", uid, "err", logged(err, namespace, name))
			}
			return
		}
		klog.ErrorS(logged(err, namespace, name), "reporting execution", "execution", uid)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (r *Runner) post(ctx context.Context, namespace, name string, uid types.UID, rep *nodusv1.ExecutionReport) (*nodusv1.Execution, error) {
	// The report is about this execution, not one made since under its
	// name. A UID that is no UUID (a placement refused for it) was never
	// the execution's: that refusal goes by name.
	rep.UID = ""
	if id, err := uuid.Parse(string(uid)); err == nil && id.String() == string(uid) {
		rep.UID = uid
	}
	return r.opts.Client.NodusV1().Executions(namespace).Report(ctx, name, rep, metav1.CreateOptions{})
}

// fitMessage cuts a report's message (an error's text, say) to what the
// server takes, at a character boundary: a report refused for its length
// would not be sent again.
func fitMessage(m string) string {
	m = validation.WithoutTerminalControls(m)
	if len(m) <= validation.MaxReportText {
		return m
	}
	const cut = " …"
	m = m[:validation.MaxReportText-len(cut)]
	for !utf8.ValidString(m) {
		m = m[:len(m)-1]
	}
	return m + cut
}

func isReason(err error, reason string) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && string(status.Status().Reason) == reason
}

// claim reports the execution running, retrying while the server cannot be
// reached or fails (a 5xx, a 408, a 429); the server's refusals (cancelled,
// withdrawn, gone) are final. A start whose answer was lost may have
// landed: the server takes the same report again.
func (r *Runner) claim(ctx context.Context, e *nodusv1.Execution) error {
	rep := &nodusv1.ExecutionReport{Phase: nodusv1.ExecutionRunning, Reason: "Started", Message: "running on " + r.opts.Alias}
	const attempts = 5
	for attempt, wait := 1, 500*time.Millisecond; ; attempt, wait = attempt+1, 2*wait {
		_, err := r.post(ctx, e.Namespace, e.Name, e.UID, rep)
		if err == nil || apioutcome.Final(err) || attempt == attempts {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// unconfirmedStart settles a start that the server may have taken without
// its answer arriving: it asks the server, until it answers, what it shows.
// Shown running, the execution did not run here and is reported failed:
// else the server would hold its GPUs, the slot and the borrower's cap for
// ever, past a withdrawal and the reservation's end (the runner reports as
// orphans only what a former agent started). Shown scheduled, it was not
// taken, and the informer's resync offers it again.
func (r *Runner) unconfirmedStart(ctx context.Context, e *nodusv1.Execution) *outcome {
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		// An agent may list only the executions placed on its host.
		list, err := r.opts.Client.NodusV1().Executions("").List(ctx, metav1.ListOptions{FieldSelector: "status.host=" + r.opts.Alias})
		if apioutcome.Final(err) {
			// Refused (this agent's credential retired, say): asking again
			// changes nothing, and the run holds its GPUs meanwhile.
			klog.ErrorS(logged(err, e.Namespace, e.Name), "cannot tell whether an unconfirmed start landed", "execution", e.UID)
			return nil
		}
		if err == nil {
			for _, got := range list.Items {
				if got.UID == e.UID && got.Status.Phase == nodusv1.ExecutionRunning {
					return &outcome{phase: nodusv1.ExecutionFailed, reason: ReasonStartFailed,
						message: "the server took the host agent's start but did not confirm it in time; the execution did not run"}
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// logged is err, of a request about the execution namespace/name, as
// nodusd's log shows it, which names an execution by its UID only: the log
// reaches the system journal, which the adm and systemd-journal groups
// read, and an owner's login user may be in one. A request's URL (in a
// transport error) names the execution's project; the server's message
// names both where it quotes them, and keeps the rest.
func logged(err error, namespace, name string) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		msg := s.Message
		for _, quoted := range [][2]string{{name, "<execution>"}, {namespace, "<project>"}} {
			if quoted[0] != "" {
				msg = strings.ReplaceAll(msg, strconv.Quote(quoted[0]), quoted[1])
			}
		}
		how := "the server answered"
		if apioutcome.Final(err) {
			how = "refused"
		}
		return fmt.Errorf("%s %d %s: %s", how, s.Code, s.Reason, msg)
	}
	var u *url.Error
	if errors.As(err, &u) {
		return fmt.Errorf("%s: %w", u.Op, u.Err)
	}
	return err
}
