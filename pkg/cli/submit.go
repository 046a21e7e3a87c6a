package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/names"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// submitAttempts is how many times nodus sends one submission.
const submitAttempts = 5

// submitExecution creates e in project under a name nodus picks itself,
// not the server's generateName, so that a try whose answer was lost (the
// server unreachable, a 5xx, a 429) can be sent again: if that try landed,
// the retry finds the execution there under the same name, with the same
// spec, and it is this submission. An execution is never created twice for
// one submission; one that cannot be told apart is reported, not retried.
func submitExecution(ctx context.Context, c versioned.Interface, project string, e *nodusv1.Execution, attempts int, progress io.Writer) (*nodusv1.Execution, error) {
	e = e.DeepCopy()
	e.GenerateName = ""
	e.Name = names.SimpleNameGenerator.GenerateName("run-")
	executions := c.NodusV1().Executions(project)
	mayHaveLanded := false
	for attempt := 1; ; attempt++ {
		created, err := executions.Create(ctx, e, metav1.CreateOptions{})
		switch {
		case err == nil:
			return created, nil
		case apierrors.IsAlreadyExists(err) && mayHaveLanded:
			existing, getErr := executions.Get(ctx, e.Name, metav1.GetOptions{})
			if getErr == nil && equality.Semantic.DeepEqual(existing.Spec, e.Spec) {
				return existing, nil
			}
			return nil, fmt.Errorf("a try to submit %s/%s got no answer, and %s/%s now exists but is not recognisably this submission: "+
				"check it (`nodus executions get %s/%s`) before you submit again", project, e.Name, project, e.Name, project, e.Name)
		case apierrors.IsAlreadyExists(err) && attempt < attempts:
			// Another execution has the name this one drew: draw again.
			e.Name = names.SimpleNameGenerator.GenerateName("run-")
			continue
		case !transient(err) || attempt >= attempts:
			if mayHaveLanded {
				return nil, fmt.Errorf("%w (an earlier try got no answer and may have submitted it as %s/%s: `nodus executions get %s/%s` tells)",
					err, project, e.Name, project, e.Name)
			}
			return nil, err
		}
		mayHaveLanded = true
		fmt.Fprintf(progress, "retrying the submission of %s/%s (%s)\n", project, e.Name, oneLine(err))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
}

// transient says whether a request may succeed if sent again unchanged: the
// server could not be reached, failed (5xx), or asked to slow down (429).
// An answer nodus refused (a redirect, one too large) and a server it does
// not trust (its certificate) would be the same the next time: their
// reasons say which are transient.
func transient(err error) bool {
	var status apierrors.APIStatus
	if errors.Is(err, context.Canceled) {
		return false
	}
	if r, ok := refusalOf(err); ok {
		return r.reason.Transient
	}
	if !errors.As(err, &status) || status.Status().Code == 0 {
		return true
	}
	code := status.Status().Code
	return code >= 500 || code == http.StatusTooManyRequests
}
