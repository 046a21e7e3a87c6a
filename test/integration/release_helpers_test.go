package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/actions"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/envelope"
	"github.com/nodus-dev/nodus/pkg/idempotency"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// fleet is a server with a project, its people and a pool of nodes.
type fleet struct {
	s                                       *testserver.Server
	admin, member, viewer, outsider, nobody *rest.Config
}

func newFleet(t *testing.T, s *testserver.Server) *fleet {
	t.Helper()
	c, ctx := s.Client.NodusV1(), ctx(t)
	must := func(_ interface{}, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Projects().Create(ctx, project("acme",
		nodusv1.ProjectMember{Name: "alice", Role: nodusv1.ProjectRoleAdmin},
		nodusv1.ProjectMember{Name: "mary", Role: nodusv1.ProjectRoleMember},
		nodusv1.ProjectMember{Name: "victor", Role: nodusv1.ProjectRoleViewer}), metav1.CreateOptions{}))
	must(c.Projects().Create(ctx, project("other", nodusv1.ProjectMember{Name: "oscar", Role: nodusv1.ProjectRoleAdmin}), metav1.CreateOptions{}))
	must(c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "fra1"}}, metav1.CreateOptions{}))
	return &fleet{s: s, admin: tokenFor(t, s, "alice"), member: tokenFor(t, s, "mary"), viewer: tokenFor(t, s, "victor"),
		outsider: tokenFor(t, s, "oscar"), nobody: anonymous(s)}
}

// host enrolls a node and reserves it to acme for [start, end), and waits
// until the controller shows the active ReservedHost.
func (f *fleet) host(t *testing.T, name string, start, end time.Time) *nodusv1.ReservedHost {
	t.Helper()
	f.node(t, name)
	f.reserve(t, name, nodusv1.ReservationPlacement{Node: name}, start, end)
	return f.waitHost(t, name, func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
}

func (f *fleet) node(t *testing.T, name string) {
	t.Helper()
	c, ctx := f.s.Client.NodusV1(), ctx(t)
	n, err := testfleet.Node(ctx, f.s.Client, name, "fra1", "gpu-h100x8", "ubuntu")
	if err != nil {
		t.Fatal(err)
	}
	n.Status.AgentGeneration = 1
	n.Status.SSHHostKey, n.Status.SSHAddress = testfleet.HostKey(name), "192.0.2.10:22"
	n.Status.Inventory = nodusv1.NodeInventory{CPU: 224, MemoryMiB: 2 << 20, DiskGiB: 3500,
		GPUs: []nodusv1.NodeGPU{{Type: "h100-sxm-80g", MemoryMiB: 81559, Driver: "550.54.15"}}}
	if _, err := c.Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *fleet) reserve(t *testing.T, name string, placement nodusv1.ReservationPlacement, start, end time.Time) {
	t.Helper()
	if err := testfleet.Reserve(ctx(t), f.s.Client, name, "acme", placement, start, end); err != nil {
		t.Fatal(err)
	}
}

// waitHost polls the ReservedHost until ok holds.
func (f *fleet) waitHost(t *testing.T, name string, ok func(*nodusv1.ReservedHost) bool) *nodusv1.ReservedHost {
	t.Helper()
	var last *nodusv1.ReservedHost
	err := testfleet.Eventually(ctx(t), 30*time.Second, func(c context.Context) (bool, error) {
		h, err := f.s.Client.NodusV1().ReservedHosts("acme").Get(c, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		last = h
		return ok(h), nil
	})
	if err != nil {
		t.Fatalf("reservedhost %s never reached the expected state; last seen: %+v", name, last)
	}
	return last
}

func (f *fleet) reservation(t *testing.T, name string) *nodusv1.Reservation {
	t.Helper()
	r, err := f.s.Client.NodusV1().Reservations().Get(ctx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// release POSTs to release-capacity as cfg; query and headers are optional.
func (f *fleet) release(t *testing.T, cfg *rest.Config, name, body, query string, headers ...string) response {
	t.Helper()
	path := "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/" + name + "/release-capacity"
	if query != "" {
		path += "?" + query
	}
	return do(t, cfg, "POST", path, "application/json", strings.NewReader(body), headers...)
}

// heartbeat POSTs a heartbeat for node as the operator.
func (f *fleet) heartbeat(t *testing.T, node string, beat nodusv1.NodeHeartbeat) response {
	t.Helper()
	data, _ := json.Marshal(beat)
	return do(t, f.s.Config, "POST", "/apis/nodus.dev/v1/nodes/"+node+"/heartbeat", "application/json", strings.NewReader(string(data)))
}

// keepBeating heartbeats nodes (agent generation 1) every two seconds
// until the test ends.
func (f *fleet) keepBeating(t *testing.T, nodes ...string) {
	beat, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	for _, n := range nodes {
		go func() {
			for beat.Err() == nil {
				_ = testfleet.Heartbeat(beat, f.s.Client, n, nodusv1.NodeHeartbeat{AgentGeneration: 1})
				select {
				case <-beat.Done():
				case <-time.After(2 * time.Second):
				}
			}
		}()
	}
}

func decodeHost(t *testing.T, r response) *nodusv1.ReservedHost {
	t.Helper()
	var h nodusv1.ReservedHost
	if err := json.Unmarshal(r.body, &h); err != nil || h.Kind != "ReservedHost" {
		t.Fatalf("not a ReservedHost (%v): %s", err, r.body)
	}
	return &h
}

func evidence(name string, epoch int64, sessions, executions int32) nodusv1.ReservationEvidence {
	return nodusv1.ReservationEvidence{Name: name, AppliedEpoch: epoch, OwnerSessions: sessions, BorrowerExecutions: executions}
}

// envelopeOfReplay decodes a replayed error, whose requestId names the first
// request rather than the X-Request-Id of the replay.
func envelopeOfReplay(t *testing.T, r response) envelope.Status {
	t.Helper()
	var s envelope.Status
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatalf("%v: %s", err, r.body)
	}
	return s
}

func idempotencyStore(c *clientv3.Client) *idempotency.Store { return idempotency.NewStore(c) }

func scopeKey(user, method, path, key string) string {
	return actions.ScopeKey(user, method, path, key)
}

func fingerprint(query, body string) string { return actions.Fingerprint(query, []byte(body)) }
