package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/clusteridentity"
	"github.com/nodus-dev/nodus/pkg/controller/scheduler"
	"github.com/nodus-dev/nodus/pkg/failover"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	nodustyped "github.com/nodus-dev/nodus/pkg/generated/clientset/versioned/typed/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/pki"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// etcdMember is one member of the test's etcd cluster, a process of the
// etcd binary built from the etcd server module Nodus embeds.
type etcdMember struct {
	name, clientURL, peerURL, dir string
	cmd                           *exec.Cmd
	exited                        chan error
	log                           *syncBuffer
}

// etcdTLS are the files of the cluster's CA and of the client credential
// nodus-server is given.
type etcdTLS struct{ ca, cert, key string }

// startEtcdCluster starts three members serving clients and peers over TLS
// with client certificates.
func startEtcdCluster(t *testing.T, dir string) ([]*etcdMember, etcdTLS) {
	t.Helper()
	binary := filepath.Join(dir, "etcd")
	build := exec.Command("go", "build", "-o", binary, "go.etcd.io/etcd/server/v3")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build etcd from its server module: %v\n%s", err, out)
	}
	pkiDir := filepath.Join(dir, "pki")
	ca, err := pki.NewCA("nodus-e2e-etcd-ca")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteFiles(pkiDir); err != nil {
		t.Fatal(err)
	}
	client, err := ca.IssueClient("nodus-server", nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := etcdTLS{ca: filepath.Join(pkiDir, "ca.crt"), cert: filepath.Join(pkiDir, "client.crt"), key: filepath.Join(pkiDir, "client.key")}
	if err := os.WriteFile(creds.cert, client.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(creds.key, client.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	var members []*etcdMember
	var initial []string
	for i := range 3 {
		m := &etcdMember{name: fmt.Sprintf("m%d", i), dir: filepath.Join(dir, fmt.Sprintf("m%d", i)), log: &syncBuffer{}, exited: make(chan error, 1)}
		m.clientURL, m.peerURL = "https://127.0.0.1:"+itoa(freePort(t)), "https://127.0.0.1:"+itoa(freePort(t))
		initial = append(initial, m.name+"="+m.peerURL)
		members = append(members, m)
	}
	for _, m := range members {
		cert, key, err := ca.LoadOrCreatePeer(pkiDir, m.name, []string{"127.0.0.1", "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		m.cmd = exec.Command(binary, "--name", m.name, "--data-dir", m.dir,
			"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL,
			"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new", "--initial-cluster-token", "nodus-e2e",
			"--client-cert-auth", "--trusted-ca-file", creds.ca, "--cert-file", cert, "--key-file", key,
			"--peer-client-cert-auth", "--peer-trusted-ca-file", creds.ca, "--peer-cert-file", cert, "--peer-key-file", key,
			"--log-level", "warn")
		m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func(m *etcdMember) { m.exited <- m.cmd.Wait() }(m)
		t.Cleanup(func() {
			if m.cmd.ProcessState == nil {
				_ = m.cmd.Process.Kill()
				<-m.exited
			}
		})
	}
	return members, creds
}

func itoa(n int) string { return strconv.Itoa(n) }

// haCounts are what the fault test saw.
type haCounts struct {
	mu                                        sync.Mutex
	releases, allocations, executions, beats  int // acknowledged
	beatErrors, writeErrors                   int
	releasedOnce, releasedTwice, releaseLost  int
	allocationsLost, doubleClaims, doubleGPUs int
	executionsLost                            int
}

// TestHAOnARealEtcdCluster runs three nodus-server replicas on a
// three-member etcd cluster (TLS, client certificates) and drives
// releases with Idempotency-Keys, allocations, executions on lent hosts
// and the heartbeats of simulated agents through all of them, every
// client knowing the three replicas. It kills -9 the replica that leads
// the controllers, and then the etcd leader member. Afterwards no
// acknowledged write is lost, no release applied twice, no node claimed
// twice and no GPU placed twice; the failover times are logged.
func TestHAOnARealEtcdCluster(t *testing.T) {
	requireKubectl(t)
	dir := t.TempDir()
	members, creds := startEtcdCluster(t, dir)
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.clientURL)
	}
	keyFile := filepath.Join(dir, "cluster.key")
	if _, err := clusteridentity.EnsureKeyFile(keyFile); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--etcd-servers", strings.Join(endpoints, ","), "--etcd-cafile", creds.ca, "--etcd-certfile", creds.cert,
		"--etcd-keyfile", creds.key, "--cluster-key-file", keyFile, "--heartbeat-interval", "1s"}
	var replicas []*serverProcess
	var urls []string
	for i := range 3 {
		r := startServerWith(t, filepath.Join(dir, fmt.Sprintf("replica-%d", i)), flags...)
		replicas = append(replicas, r)
		urls = append(urls, r.Config.Host)
	}
	// Every client knows the three replicas and moves between them.
	spread := func(cfg *rest.Config) *rest.Config {
		c := rest.CopyConfig(cfg)
		c.Host, c.WrapTransport, c.QPS, c.Burst, c.Timeout = urls[0], failover.Wrap(urls), 500, 1000, 20*time.Second
		return c
	}
	admin := versioned.NewForConfigOrDie(spread(replicas[0].Config))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := admin.NodusV1()
	must := func(_ interface{}, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*nodusv1.Project{
		{ObjectMeta: metav1.ObjectMeta{Name: "acme"}, Spec: nodusv1.ProjectSpec{Members: []nodusv1.ProjectMember{{Name: "alice", Role: nodusv1.ProjectRoleAdmin}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "beta"}, Spec: nodusv1.ProjectSpec{Members: []nodusv1.ProjectMember{{Name: "bob", Role: nodusv1.ProjectRoleMember}}}},
	} {
		must(c.Projects().Create(ctx, p, metav1.CreateOptions{}))
	}
	must(c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "ha"}, Spec: nodusv1.PoolSpec{
		Lending: &nodusv1.PoolLending{Open: true, Borrowers: []nodusv1.PoolBorrower{{Project: "beta", MaxGPUs: 1000}}}}}, metav1.CreateOptions{}))
	token := func(user string) *rest.Config {
		tok, err := c.AccessTokens().Create(ctx, &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{Name: user}, Spec: nodusv1.AccessTokenSpec{User: user}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := &rest.Config{Host: urls[0], BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: replicas[0].Config.CAData}}
		return spread(cfg)
	}
	alice, bob := token("alice"), token("bob")

	// Nodes: lent hosts (2 GPUs each), hosts to release, and free nodes
	// for allocations; each with an enrolled, heartbeating agent.
	const lent, released, free = 8, 12, 12
	agents := map[string]versioned.Interface{}
	var agentsMu sync.Mutex
	enroll := func(name, class string, gpus int) error {
		cfg, err := testfleet.EnrollAgent(ctx, admin, urls[0], name, nodusv1.EnrollmentTokenSpec{Pool: "ha", ResourceClass: class, LoginUser: "ubuntu"}, filepath.Join(dir, "agents", name))
		if err != nil {
			return err
		}
		n, err := c.Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Inventory = nodusv1.NodeInventory{CPU: 64, MemoryMiB: 512 << 10, DiskGiB: 1000}
		for range gpus {
			n.Status.Inventory.GPUs = append(n.Status.Inventory.GPUs, nodusv1.NodeGPU{Type: "h100-sxm-80g", MemoryMiB: 81559})
		}
		if _, err := c.Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return err
		}
		agentsMu.Lock()
		agents[name] = versioned.NewForConfigOrDie(spread(cfg))
		agentsMu.Unlock()
		return nil
	}
	start, end := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if err := testfleet.Parallel(lent+released+free, 4, func(i int) error {
		switch {
		case i < lent:
			name := fmt.Sprintf("lent-%02d", i)
			if err := enroll(name, "gpu-lent", 2); err != nil {
				return err
			}
			return testfleet.Reserve(ctx, admin, name, "acme", nodusv1.ReservationPlacement{Node: name}, start, end)
		case i < lent+released:
			name := fmt.Sprintf("rel-%02d", i-lent)
			if err := enroll(name, "gpu-rel", 1); err != nil {
				return err
			}
			return testfleet.Reserve(ctx, admin, name, "acme", nodusv1.ReservationPlacement{Node: name}, start, end)
		default:
			return enroll(fmt.Sprintf("free-%02d", i-lent-released), "gpu-free", 1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	// One host runs the real nodusd, enrolled with the three replicas' URLs.
	realAgent := os.Geteuid() == 0
	if realAgent {
		startRealAgent(t, ctx, admin, urls, filepath.Join(dir, "nodusd"))
	} else {
		t.Log("not root: the real nodusd's failover is not checked (CI runs as root)")
	}
	counts := &haCounts{}
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	var beats sync.WaitGroup
	for name, client := range agents {
		beats.Add(1)
		go func() {
			defer beats.Done()
			for beatCtx.Err() == nil {
				err := testfleet.Heartbeat(beatCtx, client, name, nodusv1.NodeHeartbeat{AgentGeneration: 1})
				counts.mu.Lock()
				if err == nil {
					counts.beats++
				} else if beatCtx.Err() == nil {
					counts.beatErrors++
				}
				counts.mu.Unlock()
				select {
				case <-beatCtx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	if err := testfleet.Count(ctx, time.Minute, lent+released, testfleet.ActiveReservations, admin); err != nil {
		t.Fatalf("active reservations: %v", err)
	}
	aliceHTTP := httpClientFor(t, alice)
	for i := range lent {
		code, body := post(aliceHTTP, urls[0], fmt.Sprintf("/apis/nodus.dev/v1/namespaces/acme/reservedhosts/lent-%02d/lend", i), `{"epoch":1}`, "")
		if code != http.StatusOK {
			t.Fatalf("lend lent-%02d: %d %s", i, code, body)
		}
	}

	// The workload, through every replica, while the faults happen.
	var workload sync.WaitGroup
	var acknowledgedAllocations, acknowledgedExecutions sync.Map
	workload.Add(3)
	go func() { // keyed releases, retried with their key until answered
		defer workload.Done()
		for i := range released {
			if acknowledge(t, fmt.Sprintf("release of rel-%02d", i), func() error {
				code, body := post(aliceHTTP, urls[0], fmt.Sprintf("/apis/nodus.dev/v1/namespaces/acme/reservedhosts/rel-%02d/release-capacity", i),
					`{"epoch":1,"agreed":true}`, fmt.Sprintf("ha-release-%02d", i))
				if code != http.StatusOK {
					return fmt.Errorf("%d %s", code, body)
				}
				return nil
			}) {
				counts.mu.Lock()
				counts.releases++
				counts.mu.Unlock()
			}
			time.Sleep(700 * time.Millisecond)
		}
	}()
	go func() { // allocations by class: each claims a free node
		defer workload.Done()
		for i := range free - 2 { // and two more, the probes of the faults
			name := fmt.Sprintf("alloc-%02d", i)
			if acknowledge(t, "allocation "+name, func() error {
				_, err := c.Allocations().Create(ctx, &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-free"}}, metav1.CreateOptions{})
				return err
			}) {
				acknowledgedAllocations.Store(name, time.Now())
			}
			time.Sleep(700 * time.Millisecond)
		}
	}()
	go func() { // executions of one GPU on the lent hosts, more than fit
		defer workload.Done()
		borrower := versioned.NewForConfigOrDie(bob).NodusV1().Executions("beta")
		for i := range 2 * lent * 2 {
			name := fmt.Sprintf("job-%02d", i)
			if acknowledge(t, "execution "+name, func() error {
				_, err := borrower.Create(ctx, &nodusv1.Execution{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: nodusv1.ExecutionSpec{Pool: "ha", Command: []string{"train"}, GPUs: 1, MaxRuntimeSeconds: 3600}}, metav1.CreateOptions{})
				return err
			}) {
				acknowledgedExecutions.Store(name, true)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()

	// Fault 1: kill -9 the replica that leads the controllers.
	time.Sleep(2 * time.Second)
	leaderIdx := leadingReplica(replicas)
	if leaderIdx < 0 {
		t.Fatal("no replica says it leads the controllers")
	}
	killedAt := time.Now()
	_ = replicas[leaderIdx].Cmd.Process.Kill()
	<-replicas[leaderIdx].Exited
	t.Logf("killed -9 replica %d, which led the controllers", leaderIdx)
	resumed := allocationActiveWithin(t, ctx, c, "after-replica-kill", 60*time.Second)
	t.Logf("replica kill -9 → an allocation made after it is active: %s (the leader lease is 5 s)", resumed.Sub(killedAt).Round(time.Millisecond))

	// Fault 2: kill -9 the etcd leader member.
	leader := etcdLeader(t, members, creds)
	etcdKilled := time.Now()
	_ = leader.cmd.Process.Kill()
	<-leader.exited
	t.Logf("killed -9 etcd member %s, the etcd leader", leader.name)
	var firstWrite time.Time
	var lastErr error
	if err := testfleet.Eventually(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		// A write that etcd took while it lost its leader times out
		// there (after 7 s by etcd's defaults); each try here waits a
		// second, to see when writes go through again.
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.Pools().Patch(ctx, "ha", types.MergePatchType, []byte(`{"metadata":{"annotations":{"e2e/probe":"`+itoa(int(time.Now().UnixNano()))+`"}}}`), metav1.PatchOptions{})
		if err == nil {
			firstWrite = time.Now()
		}
		lastErr = err
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no write succeeded after the etcd leader died: %v", lastErr)
	}
	resumed2 := allocationActiveWithin(t, ctx, c, "after-etcd-kill", 60*time.Second)
	t.Logf("etcd leader kill -9 → first API write %s, → an allocation made after it is active %s",
		firstWrite.Sub(etcdKilled).Round(time.Millisecond), resumed2.Sub(etcdKilled).Round(time.Millisecond))

	workload.Wait()
	// Everything acknowledged settles: allocations active, executions placed.
	if err := testfleet.Count(ctx, 90*time.Second, free, testfleet.ActiveAllocations, admin); err != nil {
		t.Errorf("not every acknowledged allocation became active: %v", err)
	}
	// Every GPU gets used, once the scheduler has settled the placements
	// whose answers the faults lost (it writes them again for up to 10 s).
	borrowerExecutions := versioned.NewForConfigOrDie(bob).NodusV1().Executions("beta")
	if err := testfleet.Eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		list, err := borrowerExecutions.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil // a replica may be gone; the next try goes to another
		}
		placed := 0
		for _, e := range list.Items {
			if e.Status.Phase == nodusv1.ExecutionScheduled || e.Status.Phase == nodusv1.ExecutionRunning {
				placed++
			}
		}
		return placed >= lent*2, nil
	}); err != nil {
		logPlacements(t, ctx, borrowerExecutions, members, creds, replicas)
	}
	time.Sleep(2 * time.Second) // a scheduler pass or two more
	stopBeats()
	beats.Wait()

	// The checks.
	if realAgent {
		// Its heartbeats moved off the killed replica: liveness never lapsed
		// for three intervals of 1 s.
		n, err := c.Nodes().Get(ctx, "agent-real", metav1.GetOptions{})
		if err != nil || !meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady) {
			t.Errorf("the real nodusd's node after the faults: %v %+v", err, n.Status.Conditions)
		}
	}
	reservations, err := c.Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimedBy := map[string]string{}
	for _, r := range reservations.Items {
		if strings.HasPrefix(r.Name, "rel-") {
			switch {
			case r.Status.Epoch == 2 && (r.Status.State == nodusv1.ReservationStateReleasing || r.Status.State == nodusv1.ReservationStateReleased):
				counts.releasedOnce++
			case r.Status.Epoch > 2:
				counts.releasedTwice++
			default:
				counts.releaseLost++
			}
		}
		if r.Status.Node != "" && r.Status.State != nodusv1.ReservationStateEnded && r.Status.State != nodusv1.ReservationStateReleased {
			claimedBy[r.Status.Node] = "reservation " + r.Name
		}
	}
	allocations, err := c.Allocations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, a := range allocations.Items {
		stored[a.Name] = true
		if a.Status.Node == "" {
			continue
		}
		if other, ok := claimedBy[a.Status.Node]; ok {
			counts.doubleClaims++
			t.Errorf("node %s is claimed by allocation %s and %s", a.Status.Node, a.Name, other)
		}
		claimedBy[a.Status.Node] = "allocation " + a.Name
	}
	acknowledgedAllocations.Range(func(k, _ any) bool {
		counts.allocations++
		if !stored[k.(string)] {
			counts.allocationsLost++
			t.Errorf("acknowledged allocation %s is gone", k)
		}
		return true
	})
	executions, err := versioned.NewForConfigOrDie(bob).NodusV1().Executions("beta").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string]string{}
	storedExec := map[string]bool{}
	scheduled := 0
	for _, e := range executions.Items {
		storedExec[e.Name] = true
		if e.Status.Phase != nodusv1.ExecutionScheduled && e.Status.Phase != nodusv1.ExecutionRunning {
			continue
		}
		scheduled++
		for _, g := range e.Status.GPUIndices {
			key := fmt.Sprintf("%s/%d", e.Status.Host, g)
			if other, ok := placed[key]; ok {
				counts.doubleGPUs++
				t.Errorf("GPU %s is placed for %s and %s", key, e.Name, other)
			}
			placed[key] = e.Name
		}
	}
	acknowledgedExecutions.Range(func(k, _ any) bool {
		counts.executions++
		if !storedExec[k.(string)] {
			counts.executionsLost++
			t.Errorf("acknowledged execution %s is gone", k)
		}
		return true
	})
	if counts.releasedOnce != released {
		t.Errorf("released exactly once: %d of %d (twice: %d, not at all: %d)", counts.releasedOnce, released, counts.releasedTwice, counts.releaseLost)
	}
	if scheduled != lent*2 {
		t.Errorf("%d executions hold GPUs on %d lent hosts of 2 GPUs: want every GPU used once", scheduled, lent)
	}
	t.Logf("acknowledged: %d releases, %d allocations, %d executions, %d heartbeats (%d heartbeat errors)",
		counts.releases, counts.allocations, counts.executions, counts.beats, counts.beatErrors)
	t.Logf("afterwards: released once %d/%d, twice %d, lost %d; allocations lost %d; executions lost %d; nodes claimed twice %d; GPUs placed twice %d; GPUs in use %d/%d",
		counts.releasedOnce, released, counts.releasedTwice, counts.releaseLost, counts.allocationsLost, counts.executionsLost,
		counts.doubleClaims, counts.doubleGPUs, scheduled, lent*2)
}

// acknowledge retries op, as a client would through failures, until a
// replica acknowledges it; it fails the test after a minute of refusals.
func acknowledge(t *testing.T, what string, op func() error) bool {
	deadline := time.Now().Add(time.Minute)
	for {
		err := op()
		if apierrors.IsAlreadyExists(err) {
			// An earlier try's answer was lost, its write was not: the
			// object must be there when the checks read it.
			t.Logf("%s: acknowledged by a retry, as AlreadyExists", what)
		}
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true
		}
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) {
			t.Errorf("%s was refused: %v", what, err)
			return false
		}
		if time.Now().After(deadline) {
			t.Errorf("%s was not acknowledged within a minute: %v", what, err)
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startRealAgent enrolls node agent-real with the nodusd binary through
// every replica's URL and runs it (no sandbox, no sshd: it only beats),
// until it is Ready.
func startRealAgent(t *testing.T, ctx context.Context, admin versioned.Interface, urls []string, dir string) {
	t.Helper()
	tok, err := admin.NodusV1().EnrollmentTokens().Create(ctx, &nodusv1.EnrollmentToken{ObjectMeta: metav1.ObjectMeta{Name: "agent-real"},
		Spec: nodusv1.EnrollmentTokenSpec{Pool: "ha", NodeName: "agent-real", ResourceClass: "gpu-agent", LoginUser: "ubuntu"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	run(t, agentBinary, "enroll", "--server", strings.Join(urls, ","), "--token", tok.Status.Token, "--ca-hash", tok.Status.CAFingerprint,
		"--name", "agent-real", "--state-dir", state)
	run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "host_key"))
	agent := &agentProcess{path: agentBinary, log: &syncBuffer{}, env: os.Environ(),
		args: []string{"run", "--state-dir", state, "--ssh-host-key", filepath.Join(dir, "host_key.pub"), "--ssh-address", "127.0.0.1:22",
			"--disk-path", dir, "--sandbox", "none", "--executions-dir", filepath.Join(dir, "executions"), "--images-dir", filepath.Join(dir, "images")}}
	agent.start(t)
	t.Cleanup(agent.stop)
	if err := testfleet.Eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		n, err := admin.NodusV1().Nodes().Get(ctx, "agent-real", metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady), nil
	}); err != nil {
		t.Fatalf("the real nodusd's node is not Ready:\n%s", agent.log.String())
	}
}

// leadingReplica is the index of the live replica that last said it leads
// the controllers.
func leadingReplica(replicas []*serverProcess) int {
	for i, r := range replicas {
		if r.Cmd.ProcessState == nil && strings.Contains(r.stdout.String(), "leading the controllers") {
			return i
		}
	}
	return -1
}

// allocationActiveWithin creates an allocation of a free node, retrying
// while no replica takes it, and says when it became active.
func allocationActiveWithin(t *testing.T, ctx context.Context, c nodustyped.NodusV1Interface, name string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, err := c.Allocations().Create(ctx, &nodusv1.Allocation{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: nodusv1.AllocationSpec{ResourceClass: "gpu-free"}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("allocation %s was never accepted: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		a, err := c.Allocations().Get(ctx, name, metav1.GetOptions{})
		if err == nil && a.Status.State == nodusv1.AllocationStateActive {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("allocation %s not active within %s: %v %+v", name, within, err, a)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logPlacements tells why GPUs stayed unused: the executions not placed,
// the GPU claims in etcd, and what the replicas' schedulers said.
func logPlacements(t *testing.T, ctx context.Context, executions nodustyped.ExecutionInterface, members []*etcdMember, creds etcdTLS, replicas []*serverProcess) {
	t.Helper()
	if list, err := executions.List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range list.Items {
			if e.Status.Phase != nodusv1.ExecutionScheduled && e.Status.Phase != nodusv1.ExecutionRunning {
				t.Logf("execution %s (%s): %s %s: %s", e.Name, e.UID, e.Status.Phase, e.Status.Reason, e.Status.Message)
			}
		}
	}
	if client, err := etcdClient(members, creds); err != nil {
		t.Log(err)
	} else {
		if claims, err := client.Get(ctx, scheduler.ClaimsPrefix, clientv3.WithPrefix()); err == nil {
			for _, kv := range claims.Kvs {
				t.Logf("GPU claim %s: %s", kv.Key, kv.Value)
			}
		}
		client.Close()
	}
	for i, r := range replicas {
		for _, line := range strings.Split(r.stdout.String(), "\n") {
			if strings.Contains(line, "scheduler") || strings.Contains(line, "scheduling") || strings.Contains(line, "GPU claims") {
				t.Logf("replica %d: %s", i, line)
			}
		}
	}
}

// etcdClient reaches the cluster's members with the servers' credential.
func etcdClient(members []*etcdMember, creds etcdTLS) (*clientv3.Client, error) {
	tlsConfig, err := transport.TLSInfo{TrustedCAFile: creds.ca, CertFile: creds.cert, KeyFile: creds.key}.ClientConfig()
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.clientURL)
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsConfig, DialTimeout: 5 * time.Second})
}

// etcdLeader is the live member that leads the etcd cluster now.
func etcdLeader(t *testing.T, members []*etcdMember, creds etcdTLS) *etcdMember {
	t.Helper()
	client, err := etcdClient(members, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, m := range members {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := client.Status(ctx, m.clientURL)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	t.Fatal("no etcd member says it leads")
	return nil
}

// httpClientFor is cfg's HTTP client: its credential, and its failover
// over the replicas.
func httpClientFor(t *testing.T, cfg *rest.Config) *http.Client {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// post sends a JSON action to path, with an Idempotency-Key unless key is
// empty; it answers 0 when no replica answered.
func post(c *http.Client, base, path, body, key string) (int, string) {
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
