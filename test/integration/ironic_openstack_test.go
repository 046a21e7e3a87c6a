package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/nodus-dev/nodus/pkg/testserver"
)

// openstackClients are Debian's OpenStack clients, which .ci/run installs.
type openstackClients struct {
	t                   *testing.T
	endpoint, token, ca string
}

func newOpenStackClients(t *testing.T, s *testserver.Server) openstackClients {
	t.Helper()
	if _, err := os.Stat("/usr/bin/openstack"); err != nil {
		t.Skip("Debian's python3-openstackclient, python3-ironicclient and python3-openstacksdk are not installed (.ci/run installs them)")
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, s.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	// The service root, as Ironic users configure it.
	return openstackClients{t: t, endpoint: s.Config.Host + "/", token: tokenFor(t, s, "ops", "nodus:operators").BearerToken, ca: ca}
}

// cli runs `openstack baremetal ARGS -f json` and decodes its output.
func (o openstackClients) cli(out interface{}, args ...string) error {
	o.t.Helper()
	cmd := exec.Command("/usr/bin/openstack", append([]string{"--os-auth-type", "admin_token", "--os-token", o.token,
		"--os-endpoint", o.endpoint, "--os-cacert", o.ca, "baremetal"}, args...)...)
	cmd.Env = append(os.Environ(), "OS_CLOUD=", "HOME="+o.t.TempDir())
	stdout, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return &cliError{args: args, stderr: string(ee.Stderr)}
		}
		return err
	}
	if out == nil || len(strings.TrimSpace(string(stdout))) == 0 {
		return nil
	}
	return json.Unmarshal(stdout, out)
}

type cliError struct {
	args   []string
	stderr string
}

func (e *cliError) Error() string {
	return "openstack baremetal " + strings.Join(e.args, " ") + ": " + e.stderr
}

// sdk runs a Python script with openstacksdk connected to the server as
// conn; it prints one JSON document.
func (o openstackClients) sdk(out interface{}, script string) error {
	o.t.Helper()
	program := `import json, sys, openstack
conn = openstack.connect(auth_type="admin_token", auth={"endpoint": sys.argv[1], "token": sys.argv[2]}, cacert=sys.argv[3])
` + script
	cmd := exec.Command("/usr/bin/python3", "-c", program, o.endpoint, o.token, o.ca)
	cmd.Env = append(os.Environ(), "OS_CLOUD=", "HOME="+o.t.TempDir())
	stdout, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return &cliError{args: []string{"(openstacksdk)"}, stderr: string(ee.Stderr)}
		}
		return err
	}
	return json.Unmarshal(stdout, out)
}

type osNode struct {
	UUID           string  `json:"UUID"`
	Name           string  `json:"Name"`
	InstanceUUID   *string `json:"Instance UUID"`
	Maintenance    bool    `json:"Maintenance"`
	ProvisionState string  `json:"Provisioning State"`
}

func names(nodes []osNode) string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// TestIronicWithOpenStackClients drives /v1 from the service root with
// `openstack baremetal` and openstacksdk, as Ironic users do.
func TestIronicWithOpenStackClients(t *testing.T) {
	s := testserver.StartTestServer(t)
	o := newOpenStackClients(t, s)
	f := newFleet(t, s)
	readyNodes(t, f, "os-0", "os-1", "os-2")
	// Each client run starts a Python interpreter: the test outlasts the
	// three heartbeat intervals a node stays ready without one.
	f.keepBeating(t, "os-0", "os-1", "os-2")

	var all []osNode
	if err := o.cli(&all, "node", "list", "-f", "json"); err != nil || names(all) != "os-0,os-1,os-2" {
		t.Fatalf("node list: %v %+v", err, all)
	}
	if err := o.cli(nil, "node", "maintenance", "set", "os-1", "--reason", "disk swap"); err != nil {
		t.Fatal(err)
	}
	var inMaintenance, available []osNode
	if err := o.cli(&inMaintenance, "node", "list", "--maintenance", "-f", "json"); err != nil || names(inMaintenance) != "os-1" {
		t.Errorf("node list --maintenance: %v %+v", err, inMaintenance)
	}
	if err := o.cli(&available, "node", "list", "--provision-state", "available", "-f", "json"); err != nil || names(available) != "os-0,os-1,os-2" {
		t.Errorf("node list --provision-state available: %v %+v", err, available)
	}
	if err := o.cli(nil, "node", "list", "--provision-state", "bogus", "-f", "json"); err == nil || !strings.Contains(err.Error(), "Invalid provision state") {
		t.Errorf("node list --provision-state bogus: %v", err)
	}
	var shown map[string]interface{}
	if err := o.cli(&shown, "node", "show", "os-1", "-f", "json"); err != nil || shown["maintenance_reason"] != "disk swap" {
		t.Errorf("node show: %v %v", err, shown)
	}
	if err := o.cli(nil, "node", "maintenance", "unset", "os-1"); err != nil {
		t.Fatal(err)
	}

	var alloc map[string]interface{}
	if err := o.cli(&alloc, "allocation", "create", "--resource-class", "gpu-h100x8", "--name", "alloc-a", "--wait", "60", "-f", "json"); err != nil ||
		alloc["state"] != "active" || alloc["node_uuid"] == nil {
		t.Fatalf("allocation create --wait: %v %v", err, alloc)
	}
	var unassociated []osNode
	if err := o.cli(&unassociated, "node", "list", "--unassociated", "-f", "json"); err != nil || len(unassociated) != 2 {
		t.Errorf("node list --unassociated with one node allocated: %v %+v", err, unassociated)
	}
	if err := o.cli(&shown, "node", "show", alloc["node_uuid"].(string), "-f", "json"); err != nil || shown["instance_uuid"] != alloc["uuid"] {
		t.Errorf("the allocated node's instance_uuid must be its allocation's UUID %v: %v %v", alloc["uuid"], err, shown["instance_uuid"])
	}
	var allocations []map[string]interface{}
	if err := o.cli(&allocations, "allocation", "list", "-f", "json"); err != nil || len(allocations) != 1 {
		t.Errorf("allocation list: %v %v", err, allocations)
	}
	if err := o.cli(&shown, "allocation", "show", "alloc-a", "-f", "json"); err != nil || shown["uuid"] != alloc["uuid"] {
		t.Errorf("allocation show: %v %v", err, shown)
	}
	if err := o.cli(nil, "allocation", "delete", "alloc-a"); err != nil {
		t.Errorf("allocation delete: %v", err)
	}

	// openstacksdk: connect to the service root, filter by maintenance,
	// create an allocation and wait for it at once.
	var sdk struct {
		Maintenance []string `json:"maintenance"`
		State       string   `json:"state"`
		Node        string   `json:"node"`
	}
	if err := o.cli(nil, "node", "maintenance", "set", "os-2"); err != nil {
		t.Fatal(err)
	}
	err := o.sdk(&sdk, `
maintenance = [n.name for n in conn.baremetal.nodes(is_maintenance=True)]
a = conn.baremetal.create_allocation(resource_class="gpu-h100x8")
a = conn.baremetal.wait_for_allocation(a, timeout=60)
print(json.dumps({"maintenance": maintenance, "state": a.state, "node": a.node_id}))
`)
	if err != nil || strings.Join(sdk.Maintenance, ",") != "os-2" || sdk.State != "active" || sdk.Node == "" {
		t.Errorf("openstacksdk: %v %+v", err, sdk)
	}

	// Ironic names (capitals, _, .), renames, a uuid asked for, and the
	// 409s of names and UUIDs in use; last, as they need no ready node
	// (their class matches none).
	var named map[string]interface{}
	if err := o.cli(&named, "allocation", "create", "--resource-class", "none-such", "--name", "Web_A.1", "-f", "json"); err != nil ||
		named["name"] != "Web_A.1" {
		t.Fatalf("allocation create --name Web_A.1: %v %v", err, named)
	}
	if err := o.cli(nil, "allocation", "set", "Web_A.1", "--name", "web-b"); err != nil {
		t.Fatalf("allocation set --name: %v", err)
	}
	if err := o.cli(&shown, "allocation", "show", "web-b", "-f", "json"); err != nil || shown["uuid"] != named["uuid"] || shown["name"] != "web-b" {
		t.Errorf("allocation show of the new name: %v %v", err, shown)
	}
	if err := o.cli(nil, "allocation", "show", "Web_A.1", "-f", "json"); err == nil || !strings.Contains(err.Error(), "could not be found") {
		t.Errorf("the old name must be gone: %v", err)
	}
	if err := o.cli(nil, "allocation", "create", "--resource-class", "none-such", "--name", "web-b"); err == nil ||
		!strings.Contains(err.Error(), "An allocation with name web-b already exists") {
		t.Errorf("a second allocation named web-b: %v", err)
	}
	const uuid = "1c4a7e2b-5d8f-4a3c-9b6e-0f2d4c6a8e1b"
	var withUUID map[string]interface{}
	if err := o.cli(&withUUID, "allocation", "create", "--resource-class", "none-such", "--uuid", uuid, "-f", "json"); err != nil || withUUID["uuid"] != uuid {
		t.Errorf("allocation create --uuid: %v %v", err, withUUID)
	}
	if err := o.cli(nil, "allocation", "create", "--resource-class", "none-such", "--uuid", uuid); err == nil ||
		!strings.Contains(err.Error(), "An allocation with UUID "+uuid+" already exists") {
		t.Errorf("a uuid in use: %v", err)
	}
	if err := o.cli(nil, "allocation", "unset", "web-b", "--name"); err != nil {
		t.Errorf("allocation unset --name: %v", err)
	}
	if err := o.cli(&shown, "allocation", "show", named["uuid"].(string), "-f", "json"); err != nil || shown["name"] != nil {
		t.Errorf("unset name: %v %v", err, shown)
	}
	for _, ident := range []string{named["uuid"].(string), uuid} {
		if err := o.cli(nil, "allocation", "delete", ident); err != nil {
			t.Errorf("allocation delete %s: %v", ident, err)
		}
	}
}
