package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/cli"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestExecutionAdmission: executions are admitted only into pools that lend
// to the project, within its GPU cap, from members, with sane inputs.
func TestExecutionAdmission(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	must := func(_ interface{}, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Projects().Create(ctx(t), project("borrower",
		nodusv1.ProjectMember{Name: "bea", Role: nodusv1.ProjectRoleMember},
		nodusv1.ProjectMember{Name: "vera", Role: nodusv1.ProjectRoleViewer}), metav1.CreateOptions{}))
	must(c.Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "lending"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "borrower", MaxGPUs: 4}}}}}, metav1.CreateOptions{}))
	bea, vera := tokenFor(t, s, "bea"), tokenFor(t, s, "vera")
	submit := func(cfg *rest.Config, body string) response {
		return do(t, cfg, "POST", "/apis/nodus.dev/v1/namespaces/borrower/executions", "application/json", strings.NewReader(body))
	}
	execution := func(pool string, gpus int, extra string) string {
		return `{"apiVersion":"nodus.dev/v1","kind":"Execution","metadata":{"generateName":"job-"},"spec":{"pool":"` + pool +
			`","command":["python","train.py"],"gpus":` + itoa(gpus) + `,"maxRuntimeSeconds":3600` + extra + `}}`
	}

	ok := submit(bea, execution("lending", 2, ""))
	if ok.code != http.StatusCreated || !strings.Contains(string(ok.body), `"phase":"pending"`) {
		t.Fatalf("a member's execution within the cap: %d %s", ok.code, ok.body)
	}
	for name, tc := range map[string]struct {
		cfg    *rest.Config
		body   string
		code   int
		reason metav1.StatusReason
	}{
		"viewer":                  {vera, execution("lending", 1, ""), 403, metav1.StatusReasonForbidden},
		"owner's admin":           {f.admin, execution("lending", 1, ""), 403, metav1.StatusReasonForbidden},
		"over the cap":            {bea, execution("lending", 5, ""), 403, apierror.ReasonBorrowingNotAllowed},
		"pool that does not lend": {bea, execution("fra1", 1, ""), 403, apierror.ReasonBorrowingNotAllowed},
		"no such pool":            {bea, execution("nowhere", 1, ""), 403, apierror.ReasonBorrowingNotAllowed},
		"negative GPUs":           {bea, execution("lending", -1, ""), 422, metav1.StatusReasonInvalid},
		"huge GPUs":               {bea, execution("lending", 100000, ""), 422, metav1.StatusReasonInvalid},
		"empty command":           {bea, strings.Replace(execution("lending", 1, ""), `["python","train.py"]`, `[]`, 1), 422, metav1.StatusReasonInvalid},
		"bad env name":            {bea, execution("lending", 1, `,"env":[{"name":"1BAD","value":"x"}]`), 422, metav1.StatusReasonInvalid},
		// execve takes C strings: it could only fail on the host, after placement.
		"a NUL in an argument":  {bea, strings.Replace(execution("lending", 1, ""), `"train.py"`, `"train\u0000.py"`, 1), 422, metav1.StatusReasonInvalid},
		"a NUL in an env value": {bea, execution("lending", 1, `,"env":[{"name":"OK","value":"a\u0000b"}]`), 422, metav1.StatusReasonInvalid},
		"runtime over 7 days":   {bea, strings.Replace(execution("lending", 1, ""), "3600", "999999999", 1), 422, metav1.StatusReasonInvalid},
		// Nothing would remove it: the execution, and its project's deletion, would wait for ever.
		"a finalizer": {bea, strings.Replace(execution("lending", 1, ""), `"generateName":"job-"`, `"generateName":"job-","finalizers":["x.io/keep"]`, 1),
			422, metav1.StatusReasonInvalid},
	} {
		r := submit(tc.cfg, tc.body)
		if r.code != tc.code {
			t.Errorf("%s: got %d, want %d: %s", name, r.code, tc.code, r.body)
			continue
		}
		if env := envelopeOf(t, r); env.Reason != tc.reason {
			t.Errorf("%s: reason %s, want %s", name, env.Reason, tc.reason)
		}
	}
	// A project learns nothing of a pool it may not borrow from: one that
	// does not exist, one that does not lend and one that lends to others
	// refuse it in the same words.
	must(c.Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "others"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "acme", MaxGPUs: 4}}}}}, metav1.CreateOptions{}))
	refusals := map[string]string{}
	for _, pool := range []string{"nowhere", "fra1", "others"} {
		r := submit(bea, execution(pool, 1, ""))
		refusals[pool] = fmt.Sprintf("%d %s", r.code, r.body)
		if r.code == http.StatusForbidden {
			refusals[pool] = strings.ReplaceAll(envelopeOf(t, r).Message, pool, "POOL")
		}
	}
	if refusals["nowhere"] != refusals["fra1"] || refusals["fra1"] != refusals["others"] {
		t.Errorf("the refusals tell the pools apart:\n%q\n%q\n%q", refusals["nowhere"], refusals["fra1"], refusals["others"])
	}
	// Admission reads the pool as stored: closing or reopening its lending
	// applies to the very next submission, and so does a pool created a
	// moment ago (CI once refused that one from a stale cache).
	for round := 0; round < 10; round++ {
		pool, err := c.Pools().Get(ctx(t), "lending", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		open := round%2 == 1
		pool.Spec.Lending.Open = open
		must(c.Pools().Update(ctx(t), pool, metav1.UpdateOptions{}))
		want := map[bool]int{true: http.StatusCreated, false: http.StatusForbidden}[open]
		if r := submit(bea, execution("lending", 1, "")); r.code != want {
			t.Fatalf("round %d, right after setting lending open=%v: %d, want %d: %s", round, open, r.code, want, r.body)
		}
		fresh := fmt.Sprintf("fresh-%d", round)
		must(c.Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: fresh}, Spec: nodusv1.PoolSpec{
			Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "borrower", MaxGPUs: 1}}}}}, metav1.CreateOptions{}))
		if r := submit(bea, execution(fresh, 1, "")); r.code != http.StatusCreated {
			t.Fatalf("right after creating pool %s: %d %s", fresh, r.code, r.body)
		}
	}
	// Borrowers see nothing of the owner.
	for _, path := range []string{"/apis/nodus.dev/v1/namespaces/acme/reservedhosts", "/apis/nodus.dev/v1/namespaces/acme/executions",
		"/apis/nodus.dev/v1/pools/lending", "/apis/nodus.dev/v1/reservations"} {
		if r := do(t, bea, "GET", path, "", nil); r.code != http.StatusForbidden {
			t.Errorf("a borrower reading %s: %d", path, r.code)
		}
	}
	if r := do(t, vera, "GET", "/apis/nodus.dev/v1/namespaces/borrower/executions", "", nil); r.code != http.StatusOK {
		t.Errorf("a viewer lists its project's executions: %d %s", r.code, r.body)
	}

	t.Run("through the CLI", func(t *testing.T) {
		ca := filepath.Join(t.TempDir(), "ca.crt")
		if err := os.WriteFile(ca, s.Config.CAData, 0o600); err != nil {
			t.Fatal(err)
		}
		borrower := nodusCLI{t: t, config: filepath.Join(t.TempDir(), "config")}
		if out, code := borrower.run("", "login", "--server", s.Config.Host, "--token", bea.BearerToken, "--ca-file", ca); code != 0 {
			t.Fatalf("login: %d %s", code, out)
		}
		// --env NAME takes this shell's value, kept off the command line.
		t.Setenv("HF_TOKEN", "hf_s3cret")
		out, code := borrower.run("", "executions", "run", "-n", "borrower", "--pool", "lending", "--gpus", "2", "--env", "EPOCHS=3", "--env", "HF_TOKEN",
			"--", "python", "train.py")
		if code != 0 || !strings.Contains(out, "submitted (pending)") {
			t.Fatalf("executions run: %d %s", code, out)
		}
		name := strings.Fields(out)[1]
		if e, err := s.Client.NodusV1().Executions("borrower").Get(ctx(t), strings.TrimPrefix(name, "borrower/"), metav1.GetOptions{}); err != nil ||
			!slices.Contains(e.Spec.Env, nodusv1.ExecutionEnv{Name: "HF_TOKEN", Value: "hf_s3cret"}) {
			t.Errorf("--env HF_TOKEN: %v %+v", err, e)
		}
		if out, code := borrower.run("", "executions", "run", "-n", "borrower", "--pool", "lending", "--env", "NODUS_UNSET_VARIABLE", "--", "x"); code != cli.ExitUsage {
			t.Errorf("--env naming a variable not set: %d %s", code, out)
		}
		if out, code := borrower.run("", "executions", "list", "-n", "borrower"); code != 0 || !strings.Contains(out, name+"   pending   lending   2") {
			t.Errorf("executions list: %d\n%s", code, out)
		}
		if out, code := borrower.run("", "executions", "run", "-n", "borrower", "--pool", "lending", "--gpus", "9", "--", "x"); code != cli.ExitAuth ||
			!strings.Contains(out, "at most 4 GPUs") {
			t.Errorf("over the cap through the CLI: %d %s", code, out)
		}
		if out, code := borrower.run("", "executions", "cancel", name); code != 0 || !strings.Contains(out, "cancelled") {
			t.Errorf("executions cancel: %d %s", code, out)
		}
		if out, code := borrower.run("", "executions", "get", name); code != 0 || !strings.Contains(out, "cancelled") ||
			!strings.Contains(out, "reason:   Cancelled: cancelled by bea before it started") {
			t.Errorf("a cancelled execution keeps its record: %d %s", code, out)
		}
		if out, code := borrower.run("", "executions", "cancel", "borrower/nope"); code != cli.ExitNotFound {
			t.Errorf("cancelling what does not exist: %d %s", code, out)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
