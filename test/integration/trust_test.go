package integration

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/agent"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/server"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// issueToken has the operator issue an enrollment token of spec.
// An empty name makes one up.
func issueToken(t *testing.T, s *testserver.Server, name string, spec nodusv1.EnrollmentTokenSpec) *nodusv1.EnrollmentToken {
	t.Helper()
	meta := metav1.ObjectMeta{Name: name}
	if name == "" {
		meta.GenerateName = "token-"
	}
	tok, err := s.Client.NodusV1().EnrollmentTokens().Create(ctx(t), &nodusv1.EnrollmentToken{ObjectMeta: meta, Spec: spec},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestEnrollmentTokensAreBound: a token enrolls only into its own pool,
// only the node it names, and a token naming no node only a new name. A
// thief with a token of another pool cannot take over an enrolled node; the
// refusals are audited, leave the token unused and the real agent working.
func TestEnrollmentTokensAreBound(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	if _, err := s.Client.NodusV1().Pools().Create(ctx(t), &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "pb"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", Traits: []string{"CUSTOM_NVLINK"}, LoginUser: "ubuntu"}
	real := enrollAgent(t, s, "gpu-001", spec, t.TempDir())

	enroll := func(tok *nodusv1.EnrollmentToken, node string) (string, error) {
		dir := t.TempDir()
		_, err := agent.Enroll(ctx(t), agent.EnrollOptions{Server: s.Config.Host, Token: tok.Status.Token, CAHash: tok.Status.CAFingerprint, Node: node, StateDir: dir})
		return dir, err
	}
	other := spec
	other.Pool = "pb"
	unnamed := spec
	namedOther := spec
	namedOther.NodeName = "gpu-002"
	for _, tc := range []struct {
		token string
		spec  nodusv1.EnrollmentTokenSpec
		want  string
	}{
		{"pb-for-gpu-001", func() nodusv1.EnrollmentTokenSpec { o := other; o.NodeName = "gpu-001"; return o }(), string(apierror.ReasonEnrollmentTokenPoolMismatch)},
		// A token naming no node learns only that the name is taken, not
		// which pool holds it.
		{"pb-unnamed", other, string(apierror.ReasonNodeAlreadyEnrolled)},
		{"fra1-unnamed", unnamed, string(apierror.ReasonNodeAlreadyEnrolled)},
		{"fra1-for-gpu-002", namedOther, string(apierror.ReasonEnrollmentTokenNodeMismatch)},
	} {
		tok := issueToken(t, s, tc.token, tc.spec)
		dir, err := enroll(tok, "gpu-001")
		if err == nil || !strings.Contains(err.Error(), "403 "+tc.want) {
			t.Errorf("token %s enrolling gpu-001: %v, want 403 %s", tc.token, err, tc.want)
		} else if tc.spec.Pool != "fra1" && tc.spec.NodeName == "" && strings.Contains(err.Error(), "fra1") {
			t.Errorf("token %s, of another pool and naming no node, was told gpu-001's pool: %v", tc.token, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "agent.crt")); err == nil {
			t.Errorf("token %s: a credential was written", tc.token)
		}
		after, err := s.Client.NodusV1().EnrollmentTokens().Get(ctx(t), tc.token, metav1.GetOptions{})
		if err != nil || after.Status.UsedAt != nil {
			t.Errorf("token %s: a refused enrollment used the token up: %v %+v", tc.token, err, after.Status)
		}
	}
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "gpu-001", metav1.GetOptions{})
	if err != nil || n.Status.AgentGeneration != 1 || n.Spec.Pool != "fra1" {
		t.Fatalf("after the refused takeovers: %v %+v %+v", err, n.Spec, n.Status)
	}
	if r := do(t, real, "GET", "/apis/nodus.dev/v1/nodes/gpu-001", "", nil); r.code != 200 {
		t.Errorf("the real agent was locked out: %d %s", r.code, r.body)
	}
	// Every refusal is in the audit log, with the enroller and the answer.
	refused := 0
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
		refused = 0
		for _, e := range auditEvents(t, filepath.Join(s.DataDir, "audit.log"), "enroll") {
			if e.ObjectRef.Name == "gpu-001" && e.ResponseStatus.Code == http.StatusForbidden && strings.HasPrefix(e.User.Username, "nodus:enroller:") {
				refused++
			}
		}
		return refused == 4, nil
	}); err != nil {
		t.Errorf("audited refused enrollments: %d, want 4", refused)
	}

	// A token issued for the node re-enrolls it (a reinstalled server),
	// and never changes what the operator decided about it.
	reinstall := spec
	reinstall.NodeName, reinstall.ResourceClass, reinstall.Traits = "gpu-001", "gpu-a100x4", []string{"CUSTOM_OTHER"}
	if _, err := enroll(issueToken(t, s, "fra1-for-gpu-001", reinstall), "gpu-001"); err != nil {
		t.Fatalf("re-enrolling with a token for the node: %v", err)
	}
	n, err = s.Client.NodusV1().Nodes().Get(ctx(t), "gpu-001", metav1.GetOptions{})
	if err != nil || n.Status.AgentGeneration != 2 || n.Spec.Pool != "fra1" || n.Spec.ResourceClass != "gpu-h100x8" ||
		!slices.Equal(n.Spec.Traits, []string{"CUSTOM_NVLINK"}) {
		t.Errorf("after re-enrollment: %v %+v generation %d", err, n.Spec, n.Status.AgentGeneration)
	}
	// A token naming a node that does not exist yet enrolls it (the one
	// refused above was left unused, but this is a fresh one).
	if _, err := enroll(issueToken(t, s, "fra1-new-gpu-002", namedOther), "gpu-002"); err != nil {
		t.Errorf("a token naming a new node: %v", err)
	}
}

// TestAgentReportedValuesAreValidated: what an agent reports lands in
// customers' ssh_config and known_hosts and in scheduling; the server takes
// only well-formed values, whoever writes them.
func TestAgentReportedValuesAreValidated(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	own := enrollAgent(t, s, "reporter", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
	good := testfleet.HostKey("reporter")
	rsaKey := func(bits int) string {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := ssh.NewPublicKey(&k.PublicKey)
		return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	}
	status := func(fields string) string { return `{"status":{` + fields + `}}` }
	quote := func(s string) string { return fmt.Sprintf("%q", s) }
	manyGPUs := make([]string, 65)
	for i := range manyGPUs {
		manyGPUs[i] = `{"type":"h100-sxm-80g","memoryMiB":81559}`
	}
	for name, tc := range map[string]struct {
		patch, field string
	}{
		"an address with a ProxyCommand": {status(`"sshAddress":` + quote("evil\n  ProxyCommand sh -c 'touch /tmp/x':22")), "status.sshAddress"},
		"an address with a space":        {status(`"sshAddress":"host name:22"`), "status.sshAddress"},
		"an address without a port":      {status(`"sshAddress":"10.0.0.1"`), "status.sshAddress"},
		"port 0":                         {status(`"sshAddress":"10.0.0.1:0"`), "status.sshAddress"},
		"a port beyond 65535":            {status(`"sshAddress":"10.0.0.1:70000"`), "status.sshAddress"},
		"a user in the address":          {status(`"sshAddress":"root@10.0.0.1:22"`), "status.sshAddress"},
		"an option as the host":          {status(`"sshAddress":"-oProxyCommand=x:22"`), "status.sshAddress"},
		"a second known_hosts line":      {status(`"sshHostKey":` + quote(good+"\n* "+good)), "status.sshHostKey"},
		"a key that does not parse":      {status(`"sshHostKey":"ssh-ed25519 AAAA"`), "status.sshHostKey"},
		"a key with options":             {status(`"sshHostKey":` + quote(`cert-authority `+good)), "status.sshHostKey"},
		"a key with a comment":           {status(`"sshHostKey":` + quote(good+" root@host")), "status.sshHostKey"},
		"a 1024-bit RSA key":             {status(`"sshHostKey":` + quote(rsaKey(1024))), "status.sshHostKey"},
		"a million CPUs":                 {status(`"inventory":{"cpu":1000000,"memoryMiB":1,"diskGiB":1}`), "status.inventory.cpu"},
		"negative memory":                {status(`"inventory":{"cpu":1,"memoryMiB":-1,"diskGiB":1}`), "status.inventory.memoryMiB"},
		"65 GPUs":                        {status(`"inventory":{"cpu":1,"memoryMiB":1,"diskGiB":1,"gpus":[` + strings.Join(manyGPUs, ",") + `]}`), "status.inventory.gpus"},
		"a GPU type spanning lines":      {status(`"inventory":{"cpu":1,"memoryMiB":1,"diskGiB":1,"gpus":[{"type":"h100\nx","memoryMiB":1}]}`), "status.inventory.gpus[0].type"},
		"an OS with control characters":  {status(`"inventory":{"cpu":1,"memoryMiB":1,"diskGiB":1,"os":"Debian\u001b[2J"}`), "status.inventory.os"},
		"an enormous driver string":      {status(`"inventory":{"cpu":1,"memoryMiB":1,"diskGiB":1,"gpus":[{"type":"h100","memoryMiB":1,"driver":"` + strings.Repeat("9", 4096) + `"}]}`), "status.inventory.gpus[0].driver"},
	} {
		for who, cfg := range map[string]*rest.Config{"agent": own, "operator": s.Config} {
			r := do(t, cfg, "PATCH", "/apis/nodus.dev/v1/nodes/reporter/status", "application/merge-patch+json", strings.NewReader(tc.patch))
			if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), tc.field) {
				t.Errorf("%s reporting %s: %d %s", who, name, r.code, r.body)
			}
		}
	}
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "reporter", metav1.GetOptions{})
	if err != nil || n.Status.SSHAddress != "" || n.Status.SSHHostKey != "" || n.Status.Inventory.CPU != 0 {
		t.Errorf("a refused report changed the node: %v %+v", err, n.Status)
	}
	for _, ok := range []string{
		status(`"sshAddress":"10.0.0.1:22","sshHostKey":"` + good + `"`),
		status(`"sshAddress":"[2001:db8::1]:2222","sshHostKey":"` + rsaKey(2048) + `"`),
		status(`"sshAddress":"gpu-001.fra1.example.com:22"`),
		status(`"inventory":{"cpu":224,"memoryMiB":2097152,"diskGiB":3500,"os":"Ubuntu 24.04 LTS","gpus":[{"type":"h100-sxm-80g","memoryMiB":81559,"driver":"550.54.15"}]}`),
	} {
		if r := do(t, own, "PATCH", "/apis/nodus.dev/v1/nodes/reporter/status", "application/merge-patch+json", strings.NewReader(ok)); r.code != 200 {
			t.Errorf("a well-formed report %s: %d %s", ok, r.code, r.body)
		}
	}
}

// TestRetiredAgentCredentialsNeverComeBack: a node deleted and enrolled
// again under its name starts again at generation 1, yet the deleted
// node's certificate (also of generation 1) authenticates to nothing; nor
// does one of an older generation, nor can either be renewed.
func TestRetiredAgentCredentialsNeverComeBack(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	spec := nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}
	first := enrollAgent(t, s, "phoenix", spec, t.TempDir())
	if err := s.Client.NodusV1().Nodes().Delete(ctx(t), "phoenix", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(c context.Context) (bool, error) {
		_, err := s.Client.NodusV1().Nodes().Get(c, "phoenix", metav1.GetOptions{})
		return err != nil, nil
	}); err != nil {
		t.Fatal("node phoenix was not deleted")
	}
	second := enrollAgent(t, s, "phoenix", spec, t.TempDir())
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "phoenix", metav1.GetOptions{})
	if err != nil || n.Status.AgentGeneration != 1 {
		t.Fatalf("the new node phoenix: %v generation %d", err, n.Status.AgentGeneration)
	}
	if r := do(t, second, "GET", "/apis/nodus.dev/v1/nodes/phoenix", "", nil); r.code != 200 {
		t.Fatalf("the new credential: %d %s", r.code, r.body)
	}
	renew := func(cfg *rest.Config) response {
		body := fmt.Sprintf(`{"certificateRequest":%q}`, certificateRequest(t))
		return do(t, cfg, "POST", "/apis/nodus.dev/v1/nodes/phoenix/renew", "application/json", strings.NewReader(body))
	}
	beat := `{"agentGeneration":1}`
	refusedAll := func(what string, cfg *rest.Config) {
		t.Helper()
		for _, r := range []response{
			do(t, cfg, "GET", "/apis/nodus.dev/v1/nodes/phoenix", "", nil),
			do(t, cfg, "POST", "/apis/nodus.dev/v1/nodes/phoenix/heartbeat", "application/json", strings.NewReader(beat)),
			do(t, cfg, "PATCH", "/apis/nodus.dev/v1/nodes/phoenix/status", "application/merge-patch+json", strings.NewReader(`{"status":{"sshAddress":"10.6.6.6:22"}}`)),
			renew(cfg),
		} {
			if r.code != http.StatusForbidden {
				t.Errorf("%s: %d %s", what, r.code, r.body)
			} else if env := envelopeOf(t, r); env.Reason != apierror.ReasonAgentCredentialRetired || !strings.Contains(env.Fix, "--node phoenix") {
				t.Errorf("%s: reason %s, fix %q", what, env.Reason, env.Fix)
			}
		}
	}
	refusedAll("the deleted node's credential", first)

	// Renewal keeps the generation; re-enrollment retires the renewed one too.
	if r := renew(second); r.code != http.StatusOK || !strings.Contains(string(r.body), "BEGIN CERTIFICATE") {
		t.Fatalf("renewing the current credential: %d %s", r.code, r.body)
	}
	third := enrollAgent(t, s, "phoenix", func() nodusv1.EnrollmentTokenSpec { o := spec; o.NodeName = "phoenix"; return o }(), t.TempDir())
	waitCode(t, second, "/apis/nodus.dev/v1/nodes/phoenix", http.StatusForbidden)
	refusedAll("an older generation's credential", second)
	if r := do(t, third, "GET", "/apis/nodus.dev/v1/nodes/phoenix", "", nil); r.code != 200 {
		t.Errorf("the newest credential: %d %s", r.code, r.body)
	}
}

// TestAgentCertificatesRenewThemselves: with certificates valid for 12
// seconds, a running agent renews its own two thirds in (same generation,
// same node), and goes on heartbeating after its first certificate expired,
// which then authenticates no more.
func TestAgentCertificatesRenewThemselves(t *testing.T) {
	const validity = 12 * time.Second
	s := shortCertificatesServer(t, validity)
	dir := t.TempDir()
	firstCfg := enrollAgent(t, s, "renewer", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, dir)
	first := certIn(t, dir)
	if got := first.NotAfter.Sub(first.NotBefore); got < validity || got > validity+2*time.Second {
		t.Fatalf("the first certificate is valid for %s, want %s (and a little backdating)", got, validity)
	}
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond})

	var renewed *x509.Certificate
	if err := testfleet.Eventually(ctx(t), validity, func(context.Context) (bool, error) {
		c := certIn(t, dir)
		if c.SerialNumber.Cmp(first.SerialNumber) != 0 {
			renewed = c
		}
		return renewed != nil, nil
	}); err != nil {
		t.Fatal("the agent did not renew its certificate before it expired")
	}
	if !renewed.NotAfter.After(first.NotAfter) || !slices.Equal(renewed.Subject.OrganizationalUnit, first.Subject.OrganizationalUnit) ||
		renewed.Subject.CommonName != first.Subject.CommonName {
		t.Errorf("renewed certificate %v %v, first %v %v", renewed.Subject, renewed.NotAfter, first.Subject, first.NotAfter)
	}
	if renewAt := first.NotBefore.Add(first.NotAfter.Sub(first.NotBefore) * 2 / 3); renewed.NotBefore.Before(renewAt.Add(-2 * time.Second)) {
		t.Errorf("renewed at %s, before two thirds of the validity (%s)", renewed.NotBefore, renewAt)
	}
	// Past the first certificate's end, the agent still reports on time.
	time.Sleep(time.Until(first.NotAfter.Add(4 * time.Second)))
	n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "renewer", metav1.GetOptions{})
	if err != nil || !meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady) {
		t.Errorf("after the first certificate expired the node is not ready: %v %+v", err, n.Status.Conditions)
	}
	if r := do(t, firstCfg, "GET", "/apis/nodus.dev/v1/nodes/renewer", "", nil); r.code != http.StatusUnauthorized {
		t.Errorf("the expired first certificate: %d %s", r.code, r.body)
	}
	if r := do(t, agentConfig(t, s, dir), "GET", "/apis/nodus.dev/v1/nodes/renewer", "", nil); r.code != 200 {
		t.Errorf("the renewed certificate on disk: %d %s", r.code, r.body)
	}
}

// TestARefusedRenewalIsNotSentEverySecond: an agent whose renewal the
// server refuses (its credential was retired, or it expired while the host
// was off) cannot renew by asking again. It used to ask every second, for
// as long as it ran, since the wait was a tenth of the certificate's
// remaining time (at least 1 s). The agent here talks to the real server
// through a proxy that refuses each renewal as a retired credential's.
func TestARefusedRenewalIsNotSentEverySecond(t *testing.T) {
	const validity = 12 * time.Second
	s := shortCertificatesServer(t, validity)
	dir := t.TempDir()
	enrollAgent(t, s, "refused", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, dir)

	var renewals atomic.Int32
	proxy := agentProxy(t, s, dir, func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
		if !strings.HasSuffix(req.URL.Path, "/renew") {
			return false
		}
		renewals.Add(1)
		answerStatus(w, http.StatusForbidden, "AgentCredentialRetired", "the agent certificate was replaced")
		return true
	})
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Servers: []string{proxy}})

	// Two thirds into 12 s, the first renewal.
	if err := testfleet.Eventually(ctx(t), validity, func(context.Context) (bool, error) { return renewals.Load() > 0, nil }); err != nil {
		t.Fatal("the agent did not try to renew its certificate")
	}
	time.Sleep(4 * time.Second)
	if n := renewals.Load(); n != 1 {
		t.Errorf("the agent asked %d times in 4 s to renew a certificate the server refused to renew, want once", n)
	}
}

// shortCertificatesServer is a server with a fleet whose agent
// certificates are valid for validity, and heartbeats every second.
func shortCertificatesServer(t *testing.T, validity time.Duration) *testserver.Server {
	t.Helper()
	testserver.KeepLogs(t)
	s, err := testserver.Start(t.TempDir(), nil, func(o *server.Options) {
		o.AgentCertificateValidity, o.HeartbeatInterval = validity, time.Second
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	newFleet(t, s)
	return s
}

// certIn parses the agent certificate in an agent's state directory.
func certIn(t *testing.T, dir string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "agent.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("agent.crt is not PEM: %q", data)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNoLeaksThroughListsOrRefusals: a member's namespace list is one page
// of its own projects — no continue token naming another project, no count
// of the rest, whatever limit or continue it sends — and a refusal reads
// the same for a project that exists and one that does not.
func TestNoLeaksThroughListsOrRefusals(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	for _, name := range []string{"aaa-hidden", "zzz-hidden"} {
		if _, err := s.Client.NodusV1().Projects().Create(ctx(t), project(name, nodusv1.ProjectMember{Name: "oscar", Role: nodusv1.ProjectRoleAdmin}),
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type list struct {
		Metadata struct {
			Continue           string `json:"continue"`
			RemainingItemCount *int64 `json:"remainingItemCount"`
		} `json:"metadata"`
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
		} `json:"items"`
	}
	read := func(cfg *rest.Config, query string) list {
		t.Helper()
		r := do(t, cfg, "GET", "/api/v1/namespaces"+query, "", nil)
		var l list
		if r.code != 200 || json.Unmarshal(r.body, &l) != nil {
			t.Fatalf("GET namespaces%s: %d %s", query, r.code, r.body)
		}
		return l
	}
	// The operator pages; its continue token is what a member might replay.
	page := read(s.Config, "?limit=1")
	if page.Metadata.Continue == "" || page.Metadata.RemainingItemCount == nil || *page.Metadata.RemainingItemCount != 3 {
		t.Fatalf("the operator's first page of four projects: %+v", page.Metadata)
	}
	for _, query := range []string{"", "?limit=1", "?limit=2", "?limit=1&continue=" + page.Metadata.Continue} {
		l := read(f.admin, query)
		if len(l.Items) != 1 || l.Items[0].Metadata.Name != "acme" || l.Metadata.Continue != "" || l.Metadata.RemainingItemCount != nil {
			t.Errorf("alice's namespaces%s: %+v", query, l)
		}
	}
	// Refusals for another tenant's project and for none at all are alike.
	for _, path := range []string{"/apis/nodus.dev/v1/projects/%s", "/api/v1/namespaces/%s", "/apis/nodus.dev/v1/namespaces/%s/reservedhosts",
		"/apis/nodus.dev/v1/namespaces/%s/executions/x"} {
		answer := func(project string) (int, string) {
			r := do(t, f.admin, "GET", fmt.Sprintf(path, project), "", nil)
			env := envelopeOf(t, r)
			return r.code, strings.ReplaceAll(env.Message+" | "+env.Fix, project, "PROJECT")
		}
		existsCode, exists := answer("zzz-hidden")
		noneCode, none := answer("zzz-hiddem")
		if existsCode != http.StatusForbidden || existsCode != noneCode || exists != none {
			t.Errorf("GET %s: an existing project answers %d %q, a missing one %d %q", path, existsCode, exists, noneCode, none)
		}
	}
}

// TestRevocationEndsOpenWatches: a watch is authorized when it starts;
// deleting the AccessToken it came with, removing its user from the
// project, or enrolling a node's agent again ends it within seconds, while
// the watches of those whose access stays go on. The delays are logged.
func TestRevocationEndsOpenWatches(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	agentCfg := enrollAgent(t, s, "watcher", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"}, t.TempDir())
	const hosts = "/apis/nodus.dev/v1/namespaces/acme/reservedhosts?watch=1"
	const ownReservations = "/apis/nodus.dev/v1/reservations?watch=1&fieldSelector=status.node%3Dwatcher"
	alice := watchUntilCut(t, f.admin, hosts)
	mary := watchUntilCut(t, f.member, hosts)
	victor := watchUntilCut(t, f.viewer, hosts)
	agentWatch := watchUntilCut(t, agentCfg, ownReservations)

	// Mary's token is deleted.
	name, _, _ := strings.Cut(f.member.BearerToken, ".")
	deleted := time.Now()
	if err := s.Client.NodusV1().AccessTokens().Delete(ctx(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cutWithin(t, "AccessToken deleted", mary, deleted)
	if r := do(t, f.member, "GET", hosts, "", nil); r.code != http.StatusUnauthorized {
		t.Errorf("a new watch with the deleted token: %d", r.code)
	}

	// Victor leaves acme.
	p, err := s.Client.NodusV1().Projects().Get(ctx(t), "acme", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Members = slices.DeleteFunc(p.Spec.Members, func(m nodusv1.ProjectMember) bool { return m.Name == "victor" })
	removed := time.Now()
	if _, err := s.Client.NodusV1().Projects().Update(ctx(t), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cutWithin(t, "membership removed", victor, removed)
	if r := do(t, f.viewer, "GET", hosts, "", nil); r.code != http.StatusForbidden {
		t.Errorf("a new watch after leaving the project: %d", r.code)
	}

	// The node's agent is enrolled again: the old one's watch ends.
	reenrolled := time.Now()
	enrollAgent(t, s, "watcher", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", NodeName: "watcher"}, t.TempDir())
	cutWithin(t, "agent enrolled again", agentWatch, reenrolled)

	// An operator expires a token by setting its expiresAt: a token that
	// had none, or a later one.
	for _, had := range []string{"none", "a later one"} {
		cfg := tokenFor(t, s, "alice")
		name, _, _ := strings.Cut(cfg.BearerToken, ".")
		tokens := s.Client.NodusV1().AccessTokens()
		if had != "none" {
			tok, err := tokens.Get(ctx(t), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tok.Spec.ExpiresAt = &metav1.Time{Time: time.Now().Add(time.Hour)}
			if _, err := tokens.Update(ctx(t), tok, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		open := watchUntilCut(t, cfg, hosts)
		tok, err := tokens.Get(ctx(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tok.Spec.ExpiresAt = &metav1.Time{Time: time.Now().Add(time.Second)}
		expired := time.Now()
		if _, err := tokens.Update(ctx(t), tok, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cutWithin(t, "expiresAt set to a second from now, the token had "+had, open, expired)
	}

	// A token deleted while a finalizer (an operator's tool's) holds it is
	// revoked at the deletion: `nodus tokens revoke` says so.
	held := tokenFor(t, s, "alice")
	heldName, _, _ := strings.Cut(held.BearerToken, ".")
	tokens := s.Client.NodusV1().AccessTokens()
	if _, err := tokens.Patch(ctx(t), heldName, types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = tokens.Patch(context.Background(), heldName, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	open := watchUntilCut(t, held, hosts)
	revoked := time.Now()
	if err := tokens.Delete(ctx(t), heldName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cutWithin(t, "AccessToken deleted, held by a finalizer", open, revoked)
	if r := do(t, held, "GET", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts", "", nil); r.code != http.StatusUnauthorized {
		t.Errorf("a request with a token being deleted: %d %s, want 401", r.code, r.body)
	}

	stillOpen(t, "alice, still an admin", alice)
}

// TestAnAgentKeyTooWeakIsRefused: the server signs an agent's certificate
// for the key in its request, and that key then speaks for the node. A key
// weaker than the server's own (RSA under 2,048 bits, a curve under P-256)
// is refused at enrollment, leaving the token unused, and at renewal.
func TestAnAgentKeyTooWeakIsRefused(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	request := func(key crypto.Signer) string {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`{"certificateRequest":%q}`, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	}
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	weak := map[string]crypto.Signer{"a 1024-bit RSA key": rsa1024, "a P-224 key": p224}
	tok := issueToken(t, s, "", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", NodeName: "weakling"})
	for what, key := range weak {
		r := do(t, bearer(s, tok.Status.Token), "POST", "/apis/nodus.dev/v1/nodes/weakling/enroll", "application/json", strings.NewReader(request(key)))
		if r.code != http.StatusBadRequest || envelopeOf(t, r).Reason != metav1.StatusReasonBadRequest || !strings.Contains(string(r.body), "key") {
			t.Errorf("enrolling with %s: %d %s", what, r.code, r.body)
		}
	}
	if current, err := s.Client.NodusV1().EnrollmentTokens().Get(ctx(t), tok.Name, metav1.GetOptions{}); err != nil || current.Status.UsedAt != nil {
		t.Fatalf("a refused enrollment used the token up: %v %+v", err, current.Status)
	}
	agentConfig := enrollAgent(t, s, "weakling", tok.Spec, t.TempDir())
	for what, key := range weak {
		r := do(t, agentConfig, "POST", "/apis/nodus.dev/v1/nodes/weakling/renew", "application/json", strings.NewReader(request(key)))
		if r.code != http.StatusBadRequest || !strings.Contains(string(r.body), "key") {
			t.Errorf("renewing with %s: %d %s", what, r.code, r.body)
		}
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if r := do(t, agentConfig, "POST", "/apis/nodus.dev/v1/nodes/weakling/renew", "application/json", strings.NewReader(request(p384))); r.code != http.StatusOK {
		t.Errorf("renewing with a P-384 key: %d %s", r.code, r.body)
	}
}

// TestReEnrollmentForgetsWhatTheRetiredAgentReported: security.md tells an
// operator to re-enroll a node after a tenant who could become root, who
// may have copied the agent's credential and written the node's SSH host
// key and address with it: the next tenant's `nodus ssh` pins that key and
// connects to that address. Re-enrollment retired the credential but kept
// what it had reported, until the new agent reported again (never, when
// it cannot read the host key). What the node's agent reports goes with
// the generation that reported it.
func TestReEnrollmentForgetsWhatTheRetiredAgentReported(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	spec := nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}
	copied := versioned.NewForConfigOrDie(enrollAgent(t, s, "rooted", spec, t.TempDir())).NodusV1().Nodes()
	n, err := copied.Get(ctx(t), "rooted", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.SSHHostKey, n.Status.SSHAddress, n.Status.ExecutionSlots = testfleet.HostKey("the-former-tenants"), "203.0.113.9:22", 64
	n.Status.Inventory = nodusv1.NodeInventory{CPU: 1, MemoryMiB: 1 << 20, DiskGiB: 1}
	if _, err := copied.UpdateStatus(ctx(t), n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the copied credential's report: %v", err)
	}

	spec.NodeName = "rooted"
	enrollAgent(t, s, "rooted", spec, t.TempDir())
	n, err = s.Client.NodusV1().Nodes().Get(ctx(t), "rooted", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.AgentGeneration != 2 || n.Status.SSHHostKey != "" || n.Status.SSHAddress != "" || n.Status.ExecutionSlots != 0 ||
		n.Status.Inventory.MemoryMiB != 0 {
		t.Errorf("after re-enrollment (generation %d) the retired agent's report stays: host key %q, address %q, %d slots, inventory %+v",
			n.Status.AgentGeneration, n.Status.SSHHostKey, n.Status.SSHAddress, n.Status.ExecutionSlots, n.Status.Inventory)
	}
}

// TestAnEnrollmentTokenKeepsAnExpiry: a token expires (a day unless
// expiresAt says otherwise); an update that leaves expiresAt out (kubectl
// replace or edit of a manifest without it) made it valid for ever, and a
// used one let the key it enrolled be signed again for ever. Left out, the
// expiry stays; it can still be changed.
func TestAnEnrollmentTokenKeepsAnExpiry(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	tokens := s.Client.NodusV1().EnrollmentTokens()
	tok := issueToken(t, s, "kept", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8"})
	issued := tok.Spec.ExpiresAt
	if issued == nil {
		t.Fatal("a token was issued without an expiry")
	}
	tok.Spec.ExpiresAt = nil
	updated, err := tokens.Update(ctx(t), tok, metav1.UpdateOptions{})
	if err != nil || updated.Spec.ExpiresAt == nil || !updated.Spec.ExpiresAt.Equal(issued) {
		t.Errorf("an update without expiresAt: %v, expiry %v, want %v kept", err, updated.Spec.ExpiresAt, issued)
	}
	if _, err := tokens.Patch(ctx(t), "kept", types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/expiresAt"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := tokens.Get(ctx(t), "kept", metav1.GetOptions{}); err != nil || got.Spec.ExpiresAt == nil || !got.Spec.ExpiresAt.Equal(issued) {
		t.Errorf("a patch removing expiresAt: %v, expiry %v, want %v kept", err, got.Spec.ExpiresAt, issued)
	}
	sooner := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
	if got, err := tokens.Patch(ctx(t), "kept", types.MergePatchType, []byte(`{"spec":{"expiresAt":"`+sooner.UTC().Format(time.RFC3339)+`"}}`), metav1.PatchOptions{}); err != nil ||
		got.Spec.ExpiresAt == nil || !got.Spec.ExpiresAt.Equal(&sooner) {
		t.Errorf("a new expiry: %v, %v, want %v", err, got.Spec.ExpiresAt, sooner)
	}
}

// TestADeletedNodeHeldByAFinalizerRetiresItsAgent: a node an operator
// deleted stays, being deleted, while a finalizer of the operator's tools
// holds it. Its agent's credential went on working meanwhile: it beat, wrote
// its status and renewed its certificate for another term, and its open
// watches went on streaming what is placed on it. security.md says a
// deleted node's credentials end; they end at the deletion.
func TestADeletedNodeHeldByAFinalizerRetiresItsAgent(t *testing.T) {
	s := testserver.StartTestServer(t)
	newFleet(t, s)
	nodes := s.Client.NodusV1().Nodes()
	cfg := enrollAgent(t, s, "held", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "ubuntu"}, t.TempDir())
	if _, err := nodes.Patch(ctx(t), "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = nodes.Patch(context.Background(), "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	// Its watch of its own node's reservations, open before the deletion,
	// ends with it.
	open := watchUntilCut(t, cfg, "/apis/nodus.dev/v1/reservations?watch=1&fieldSelector=status.node%3Dheld")
	deleted := time.Now()
	if err := nodes.Delete(ctx(t), "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cutWithin(t, "the node deleted, held by a finalizer", open, deleted)
	waitCode(t, cfg, "/apis/nodus.dev/v1/nodes/held", http.StatusForbidden)
	for what, r := range map[string]response{
		"a heartbeat":    do(t, cfg, "POST", "/apis/nodus.dev/v1/nodes/held/heartbeat", "application/json", strings.NewReader(`{"agentGeneration":1}`)),
		"a status write": do(t, cfg, "PATCH", "/apis/nodus.dev/v1/nodes/held/status", "application/merge-patch+json", strings.NewReader(`{"status":{"sshAddress":"10.6.6.6:22"}}`)),
		"a renewal": do(t, cfg, "POST", "/apis/nodus.dev/v1/nodes/held/renew", "application/json",
			strings.NewReader(fmt.Sprintf(`{"certificateRequest":%q}`, certificateRequest(t)))),
	} {
		if r.code != http.StatusForbidden || envelopeOf(t, r).Reason != apierror.ReasonAgentCredentialRetired {
			t.Errorf("%s by the agent of a node being deleted: %d %s, want 403 AgentCredentialRetired", what, r.code, r.body)
		}
	}
}

// watchUntilCut opens a watch as cfg and returns a channel that gets the
// time its stream ended.
func watchUntilCut(t *testing.T, cfg *rest.Config, path string) <-chan time.Time {
	t.Helper()
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(watchCtx, "GET", cfg.Host+path, nil)
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch %s: %v %v", path, err, resp)
	}
	ended := make(chan time.Time, 1)
	go func() {
		defer resp.Body.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				ended <- time.Now()
				return
			}
		}
	}()
	return ended
}

// cutWithin fails t unless the watch ended within 10 s.
func cutWithin(t *testing.T, what string, ended <-chan time.Time, since time.Time) {
	t.Helper()
	select {
	case at := <-ended:
		t.Logf("%s: the open watch ended %s after the change was sent", what, at.Sub(since).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Errorf("%s: the open watch still streams 10s later", what)
	}
}

// stillOpen fails t if the watch ends within a second.
func stillOpen(t *testing.T, what string, ended <-chan time.Time) {
	t.Helper()
	select {
	case <-ended:
		t.Errorf("%s: a watch whose access stays was cut", what)
	case <-time.After(time.Second):
	}
}
