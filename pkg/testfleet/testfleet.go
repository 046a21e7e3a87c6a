// Package testfleet is the one fixture that Nodus' test suites (integration
// and end-to-end) and nodus-bench share: start nodus-server as a process,
// make nodes, heartbeat them, reserve them, enroll real agents, and wait for
// a condition. Functions return errors, so that benchmarks and tests use the
// same code; tests wrap them with t.Fatal.
package testfleet

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/agent"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
)

// HostKey is a real ed25519 SSH public key derived from seed, in the
// canonical form agents report: the server accepts no made-up key.
func HostKey(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	pub, err := ssh.NewPublicKey(ed25519.NewKeyFromSeed(sum[:]).Public())
	if err != nil {
		panic(err) // an ed25519 key always converts
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}

// Eventually polls cond every 50ms until it holds, fails, or timeout passes.
func Eventually(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, cond)
}

// Parallel runs op(0) … op(n-1) on workers goroutines and returns the first error.
func Parallel(n, workers int, op func(i int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	work := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := op(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

// Node creates a node of pool and class whose login user is loginUser.
func Node(ctx context.Context, c versioned.Interface, name, pool, class, loginUser string) (*nodusv1.Node, error) {
	return c.NodusV1().Nodes().Create(ctx, &nodusv1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodusv1.NodeSpec{Pool: pool, ResourceClass: class, LoginUser: loginUser}}, metav1.CreateOptions{})
}

// Heartbeat posts beat for node with c's credentials (an operator may beat
// for a node without an agent, at generation 0).
func Heartbeat(ctx context.Context, c versioned.Interface, node string, beat nodusv1.NodeHeartbeat) error {
	_, err := c.NodusV1().Nodes().Heartbeat(ctx, node, &beat, metav1.CreateOptions{})
	return err
}

// Term is [start, end) truncated to seconds, as the API keeps times.
func Term(start, end time.Time) (metav1.Time, metav1.Time) {
	return metav1.NewTime(start.Truncate(time.Second)), metav1.NewTime(end.Truncate(time.Second))
}

// Reservation is a reservation of project with placement over [start, end).
func Reservation(name, project string, placement nodusv1.ReservationPlacement, start, end time.Time) *nodusv1.Reservation {
	from, to := Term(start, end)
	return &nodusv1.Reservation{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: nodusv1.ReservationSpec{Project: project, Placement: placement, StartsAt: from, EndsAt: to}}
}

// Reserve creates Reservation(...).
func Reserve(ctx context.Context, c versioned.Interface, name, project string, placement nodusv1.ReservationPlacement, start, end time.Time) error {
	_, err := c.NodusV1().Reservations().Create(ctx, Reservation(name, project, placement, start, end), metav1.CreateOptions{})
	return err
}

// EnrollAgent issues an enrollment token for node (pool, class, login user
// of spec), enrolls a real agent with it into stateDir through serverURL,
// and returns the agent's credential.
func EnrollAgent(ctx context.Context, c versioned.Interface, serverURL, node string, spec nodusv1.EnrollmentTokenSpec, stateDir string) (*rest.Config, error) {
	tok, err := c.NodusV1().EnrollmentTokens().Create(ctx, &nodusv1.EnrollmentToken{ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-"}, Spec: spec},
		metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	if _, err := agent.Enroll(ctx, agent.EnrollOptions{Server: serverURL, Token: tok.Status.Token, CAHash: tok.Status.CAFingerprint,
		Node: node, StateDir: stateDir}); err != nil {
		return nil, fmt.Errorf("enrolling %s: %w", node, err)
	}
	return AgentConfig(serverURL, stateDir)
}

// AgentConfig is the credential an enrolled agent holds in stateDir now,
// read into the config, so that a later enrollment into the same directory
// makes a different client.
func AgentConfig(serverURL, stateDir string) (*rest.Config, error) {
	var files [3][]byte
	for i, name := range []string{"agent.crt", "agent.key", "ca.crt"} {
		data, err := os.ReadFile(filepath.Join(stateDir, name))
		if err != nil {
			return nil, err
		}
		files[i] = data
	}
	return &rest.Config{Host: serverURL, QPS: -1, TLSClientConfig: rest.TLSClientConfig{CertData: files[0], KeyData: files[1], CAData: files[2]}}, nil
}

// ActiveReservations counts the reservations in state active.
func ActiveReservations(ctx context.Context, c versioned.Interface) (int, error) {
	list, err := c.NodusV1().Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range list.Items {
		if r.Status.State == nodusv1.ReservationStateActive {
			n++
		}
	}
	return n, nil
}

// ActiveAllocations counts the allocations in state active.
func ActiveAllocations(ctx context.Context, c versioned.Interface) (int, error) {
	list, err := c.NodusV1().Allocations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range list.Items {
		if a.Status.State == nodusv1.AllocationStateActive {
			n++
		}
	}
	return n, nil
}

// Count waits until count says want, retrying its errors (a replica or an
// etcd member may be down meanwhile).
func Count(ctx context.Context, timeout time.Duration, want int, count func(context.Context, versioned.Interface) (int, error), c versioned.Interface) error {
	last := -1
	err := Eventually(ctx, timeout, func(ctx context.Context) (bool, error) {
		n, err := count(ctx, c)
		if err != nil {
			return false, nil
		}
		last = n
		return n == want, nil
	})
	if err != nil {
		return fmt.Errorf("%d of %d after %s", last, want, timeout)
	}
	return nil
}

// StartEtcd starts a plain-HTTP etcd member on loopback under dir, as a
// test's stand-in for an external cluster, and a client of it.
func StartEtcd(dir string) (*embeddedetcd.Server, *clientv3.Client, error) {
	etcd, err := embeddedetcd.StartInsecure(dir, time.Minute)
	if err != nil {
		return nil, nil, err
	}
	client, err := EtcdOverNetwork.Client(etcd)
	if err != nil {
		etcd.Stop(context.Background())
		return nil, nil, err
	}
	return etcd, client, nil
}

// EtcdReach is one way a server reaches etcd: over the network, as a server
// on an external cluster does, or in process, as a server on its embedded
// member does (its calls, and its errors, take another path). Code that
// talks to etcd is tested both ways.
type EtcdReach struct {
	Name      string
	InProcess bool
}

// The two ways.
var (
	EtcdOverNetwork = EtcdReach{Name: "network"}
	EtcdInProcess   = EtcdReach{Name: "in process", InProcess: true}
	EtcdReaches     = []EtcdReach{EtcdOverNetwork, EtcdInProcess}
)

// Client returns a client of etcd's member that reaches it this way; close
// it when done.
func (r EtcdReach) Client(etcd *embeddedetcd.Server) (*clientv3.Client, error) {
	if r.InProcess {
		return etcd.InProcessClient(), nil
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL}, DialTimeout: 5 * time.Second})
}
