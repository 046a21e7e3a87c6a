package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const fixtures = `apiVersion: nodus.dev/v1
kind: Project
metadata: {name: acme}
spec:
  displayName: ACME
  members:
  - {name: alice, role: admin}
---
apiVersion: nodus.dev/v1
kind: Pool
metadata: {name: fra1}
spec: {supplier: hx, location: Frankfurt}
---
apiVersion: nodus.dev/v1
kind: Node
metadata: {name: gpu-001}
spec: {pool: fra1, resourceClass: gpu-h100x8, traits: [CUSTOM_NVLINK]}
---
apiVersion: nodus.dev/v1
kind: Allocation
metadata: {name: alloc-1}
spec: {resourceClass: gpu-h100x8, traits: [CUSTOM_NVLINK]}
---
apiVersion: nodus.dev/v1
kind: Reservation
metadata: {name: r1}
spec:
  project: acme
  placement: {node: gpu-001}
  startsAt: "2026-01-01T00:00:00Z"
  endsAt: "2099-01-01T00:00:00Z"
  loginUser: ubuntu
---
apiVersion: nodus.dev/v1
kind: ReservedHost
metadata: {name: manual, namespace: acme}
status:
  inventory: {cpu: 224, memoryMiB: 2097152, diskGiB: 3500, gpus: [{type: h100-sxm-80g, memoryMiB: 81559, driver: "550.54.15"}]}
  pool: fra1
  reservation: {project: acme, startsAt: "2026-01-01T00:00:00Z", endsAt: "2099-01-01T00:00:00Z", loginUser: ubuntu, epoch: 1, state: active}
---
apiVersion: nodus.dev/v1
kind: AccessToken
metadata: {name: alice-laptop}
spec: {user: alice, description: laptop}
`

// kinds are the resources of fixtures with the object each holds.
var kinds = []struct{ resource, name, namespace string }{
	{"projects", "acme", ""},
	{"pools", "fra1", ""},
	{"nodes", "gpu-001", ""},
	{"allocations", "alloc-1", ""},
	{"reservations", "r1", ""},
	{"reservedhosts", "manual", "acme"},
	{"accesstokens", "alice-laptop", ""},
}

func TestKubectl(t *testing.T) {
	requireKubectl(t)
	dir := t.TempDir()
	s := startServer(t, dir)

	t.Run("start-up prints the kubeconfig and a command to try", func(t *testing.T) {
		want := "try: kubectl --kubeconfig " + filepath.Join(dir, "admin.kubeconfig") + " get reservedhosts -A"
		if !strings.Contains(s.stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, s.stdout.String())
		}
		if info, err := os.Stat(s.kubeconfig); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("admin.kubeconfig must be 0600: %v %v", err, info)
		}
	})

	t.Run("api-resources lists every kind", func(t *testing.T) {
		out := s.must(t, "api-resources", "--api-group=nodus.dev", "-o", "name")
		for _, k := range kinds {
			if !strings.Contains(out, k.resource+".nodus.dev") {
				t.Errorf("api-resources lacks %s:\n%s", k.resource, out)
			}
		}
		if out := s.must(t, "api-resources", "--namespaced=true", "--api-group=nodus.dev", "-o", "name"); strings.Join(strings.Fields(out), " ") != "executions.nodus.dev hostlendings.nodus.dev reservedhosts.nodus.dev" {
			t.Errorf("only Execution, HostLending and ReservedHost are namespaced, got:\n%s", out)
		}
	})

	t.Run("explain shows the spec's descriptions", func(t *testing.T) {
		out := s.must(t, "explain", "reservedhost.status.reservation")
		for _, want := range []string{
			"HostReservation is the customer-safe projection of the physical server’s",
			"Epoch fences connections after access changes.",
			"EndsAt is the exclusive end of the reservation term.",
			"State controls access, never hardware availability to other workloads.",
		} {
			if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
				t.Errorf("explain lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("create, get and list every kind", func(t *testing.T) {
		s.apply(t, fixtures, "create")
		for _, k := range kinds {
			args := []string{"get", k.resource, k.name, "-o", "yaml"}
			if k.namespace != "" {
				args = append(args, "-n", k.namespace)
			}
			if out := s.must(t, args...); !strings.Contains(out, "name: "+k.name) {
				t.Errorf("get %s: %s", k.resource, out)
			}
			if out := s.must(t, "get", k.resource, "-A"); !strings.Contains(out, k.name) {
				t.Errorf("list %s: %s", k.resource, out)
			}
		}
		out := s.must(t, "get", "reservedhosts", "-n", "acme")
		for _, col := range []string{"STATE", "EPOCH", "GPUS", "POOL", "ENDS", "AGE", "active", "1× h100-sxm-80g", "fra1"} {
			if !strings.Contains(out, col) {
				t.Errorf("reservedhosts table lacks %q:\n%s", col, out)
			}
		}
	})

	t.Run("the controller projects the reservation; release with create --raw", func(t *testing.T) {
		var out string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if out, _, _ = s.kubectl("get", "reservedhost", "r1", "-n", "acme", "-o", "yaml"); strings.Contains(out, "state: active") {
				break
			}
		}
		for _, want := range []string{"state: active", "epoch: 1", "type: Connected", "type: Eligible", "reason: WithinTerm", "loginUser: ubuntu", "project: acme"} {
			if !strings.Contains(out, want) {
				t.Errorf("projection lacks %q:\n%s", want, out)
			}
		}
		body := filepath.Join(t.TempDir(), "release.json")
		if err := os.WriteFile(body, []byte(`{"agreed": true, "epoch": 1}`), 0o600); err != nil {
			t.Fatal(err)
		}
		out = s.must(t, "create", "--raw", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/r1/release-capacity", "-f", body)
		if !strings.Contains(out, `"state":"releasing"`) || !strings.Contains(out, `"epoch":2`) {
			t.Errorf("release answer: %s", out)
		}
		_, errOut, err := s.kubectl("create", "--raw", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/r1/release-capacity", "-f", body)
		if err == nil || !strings.Contains(errOut, "AlreadyReleased") {
			t.Errorf("a second release: %v %s", err, errOut)
		}
	})

	t.Run("get namespaces lists projects", func(t *testing.T) {
		if out := s.must(t, "get", "namespaces"); !strings.Contains(out, "acme") || !strings.Contains(out, "Active") {
			t.Errorf("get namespaces:\n%s", out)
		}
		_, errOut, err := s.kubectl("get", "reservedhost", "missing", "-n", "acme")
		if err == nil || !strings.Contains(errOut, `reservedhosts.nodus.dev "missing" not found`) {
			t.Errorf("get of a missing host: %v %s", err, errOut)
		}
	})

	t.Run("patch every kind", func(t *testing.T) {
		for _, k := range kinds {
			args := []string{"patch", k.resource, k.name, "--type", "merge", "-p", `{"metadata":{"labels":{"patched":"yes"}}}`}
			if k.namespace != "" {
				args = append(args, "-n", k.namespace)
			}
			s.must(t, args...)
			if out := s.must(t, append([]string{"get", k.resource, k.name, "-o", "jsonpath={.metadata.labels.patched}"}, nsArgs(k.namespace)...)...); out != "yes" {
				t.Errorf("patch %s did not stick: %q", k.resource, out)
			}
		}
		s.must(t, "patch", "nodes", "gpu-001", "--subresource", "status", "--type", "merge", "-p", `{"status":{"sshAddress":"192.0.2.7:22"}}`)
		if out := s.must(t, "get", "node", "gpu-001", "-o", "jsonpath={.status.sshAddress}"); out != "192.0.2.7:22" {
			t.Errorf("status patch: %q", out)
		}
	})

	t.Run("server-side apply records managedFields and reports conflicts", func(t *testing.T) {
		pool := "apiVersion: nodus.dev/v1\nkind: Pool\nmetadata: {name: ams1}\nspec: {supplier: hx}\n"
		s.apply(t, pool, "apply", "--server-side", "--field-manager", "ops-a")
		managers := s.must(t, "get", "pool", "ams1", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}")
		if !strings.Contains(managers, "ops-a") {
			t.Errorf("managedFields lacks ops-a: %q", managers)
		}
		other := strings.Replace(pool, "supplier: hx", "supplier: someone-else", 1)
		out, errOut, err := s.kubectlIn([]byte(other), "apply", "--server-side", "--field-manager", "ops-b", "-f", "-")
		if err == nil || !strings.Contains(errOut, "conflict") {
			t.Errorf("conflicting apply must fail with a conflict: %v %s%s", err, out, errOut)
		}
		s.apply(t, other, "apply", "--server-side", "--field-manager", "ops-b", "--force-conflicts")
		if got := s.must(t, "get", "pool", "ams1", "-o", "jsonpath={.spec.supplier}"); got != "someone-else" {
			t.Errorf("forced apply: %q", got)
		}
	})

	t.Run("dry-run=server persists nothing", func(t *testing.T) {
		pool := "apiVersion: nodus.dev/v1\nkind: Pool\nmetadata: {name: dry}\n"
		if out := s.apply(t, pool, "create", "--dry-run=server"); !strings.Contains(out, "server dry run") {
			t.Errorf("dry run output: %s", out)
		}
		s.must(t, "delete", "pool", "fra1", "--dry-run=server")
		if _, errOut, err := s.kubectl("get", "pool", "dry"); err == nil || !strings.Contains(errOut, "not found") {
			t.Errorf("dry-run create persisted: %v %s", err, errOut)
		}
		s.must(t, "get", "pool", "fra1")
	})

	t.Run("unknown fields: strict rejects, warn warns", func(t *testing.T) {
		pool := "apiVersion: nodus.dev/v1\nkind: Pool\nmetadata: {name: strict}\nspec: {supplier: hx, bogus: 1}\n"
		_, errOut, err := s.kubectlIn([]byte(pool), "create", "-f", "-")
		if err == nil || !strings.Contains(errOut, `unknown field "spec.bogus"`) {
			t.Errorf("strict: %v %s", err, errOut)
		}
		out, errOut, err := s.kubectlIn([]byte(pool), "create", "--validate=warn", "-f", "-")
		if err != nil || !strings.Contains(errOut, `unknown field "spec.bogus"`) || !strings.Contains(out, "created") {
			t.Errorf("warn: %v %s %s", err, out, errOut)
		}
	})

	t.Run("watch sees create, update and delete", func(t *testing.T) {
		w := exec.Command("kubectl", "--kubeconfig", s.kubeconfig, "get", "pools", "--watch-only", "--output-watch-events")
		stdout, err := w.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.Process.Kill(); _ = w.Wait() }()
		lines := make(chan string, 16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// The watch starts asynchronously: create until it reports.
		expect := func(want string, act func()) {
			t.Helper()
			deadline := time.After(30 * time.Second)
			act()
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("watch ended before %q", want)
					}
					if f := strings.Fields(l); len(f) >= 2 && f[0]+" "+f[1] == want {
						return
					}
				case <-deadline:
					t.Fatalf("watch did not report %q", want)
				}
			}
		}
		// --watch-only shows nothing that happened before its watch began, and
		// kubectl starts it when it is ready: touch a probe until it reports.
		s.apply(t, "apiVersion: nodus.dev/v1\nkind: Pool\nmetadata: {name: watch-probe}\n", "create")
		defer s.must(t, "delete", "pool", "watch-probe")
		probeReported := func() bool {
			timeout := time.After(500 * time.Millisecond)
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatal("watch ended before it reported the probe")
					}
					if f := strings.Fields(l); len(f) >= 2 && f[0]+" "+f[1] == "MODIFIED watch-probe" {
						return true
					}
				case <-timeout:
					return false
				}
			}
		}
		for i := 0; ; i++ {
			if i == 60 {
				t.Fatal("kubectl's watch never reported the probe")
			}
			s.must(t, "label", "--overwrite", "pool", "watch-probe", fmt.Sprintf("probe=p%d", i))
			if probeReported() {
				break
			}
		}
		expect("ADDED watched", func() {
			s.apply(t, "apiVersion: nodus.dev/v1\nkind: Pool\nmetadata: {name: watched}\n", "create")
		})
		expect("MODIFIED watched", func() { s.must(t, "label", "pool", "watched", "seen=yes") })
		expect("DELETED watched", func() { s.must(t, "delete", "pool", "watched") })
	})

	t.Run("delete every kind", func(t *testing.T) {
		for i := len(kinds) - 1; i >= 0; i-- {
			k := kinds[i]
			if k.resource == "nodes" {
				// Its reservation, deleted above, left it a cleaning that no
				// agent here will do: kubectl shows the refusal, and the
				// operator's word that the machine does not come back as it is.
				if _, errOut, err := s.kubectl("delete", k.resource, k.name); err == nil || !strings.Contains(errOut, "NodeOwesCleaning") {
					t.Errorf("kubectl delete of a node owing a cleaning: %v %s", err, errOut)
				}
				s.must(t, "annotate", k.resource, k.name, "nodus.dev/delete-uncleaned=true")
			}
			s.must(t, append([]string{"delete", k.resource, k.name}, nsArgs(k.namespace)...)...)
			if _, errOut, err := s.kubectl(append([]string{"get", k.resource, k.name}, nsArgs(k.namespace)...)...); err == nil || !strings.Contains(errOut, "not found") {
				t.Errorf("%s still there after delete: %s", k.resource, errOut)
			}
		}
	})
}

func nsArgs(ns string) []string {
	if ns == "" {
		return nil
	}
	return []string{"-n", ns}
}
