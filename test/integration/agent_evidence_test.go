package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/agent"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestAnAgentStopsNamingAFinalReservation: a released or ended reservation
// stays on its node's list (status.node) until it is deleted, and each beat
// that named it cost the server a read of it from etcd, forever. Past 256
// of them (MaxHeartbeatReservations) a long-lived node's beats would be
// refused and the node marked not ready. Once a reservation is final, the
// agent's beats no longer name it.
func TestAnAgentStopsNamingAFinalReservation(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	dir := t.TempDir()
	enrollAgent(t, s, "agent-1", nodusv1.EnrollmentTokenSpec{Pool: "fra1", ResourceClass: "gpu-h100x8", LoginUser: "nodus-test-login"}, dir)
	var mu sync.Mutex
	var named [][]string // the reservations each beat named, in order
	proxy := agentProxy(t, s, dir, func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
		if strings.HasSuffix(req.URL.Path, "/nodes/agent-1/heartbeatstream") {
			// As a server older than streams: the agent beats with
			// requests, whose bodies this test reads.
			answerStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource")
			return true
		}
		if !strings.HasSuffix(req.URL.Path, "/nodes/agent-1/heartbeat") {
			return false
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return false
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		var beat nodusv1.NodeHeartbeat
		if json.Unmarshal(body, &beat) == nil {
			names := []string{}
			for _, e := range beat.Reservations {
				names = append(names, e.Name)
			}
			mu.Lock()
			named = append(named, names)
			mu.Unlock()
		}
		return false
	})
	beats := func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(named)
	}
	runAgent(t, agent.Options{StateDir: dir, DiskPath: dir, Grace: 100 * time.Millisecond, Servers: []string{proxy}})

	f.reserve(t, "agent-1", nodusv1.ReservationPlacement{Node: "agent-1"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	f.waitHost(t, "agent-1", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.Epoch == 1 && meta.IsStatusConditionTrue(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
	})
	if r := f.release(t, f.admin, "agent-1", agreed, ""); r.code != http.StatusOK {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	waitNode(t, s, "agent-1", func(n *nodusv1.Node) bool {
		return n.Status.ProvisionState == nodusv1.ProvisionStateAvailable && n.Status.Cleaning != nil &&
			n.Status.Cleaning.Phase == nodusv1.CleaningSucceeded && meta.IsStatusConditionTrue(n.Status.Conditions, nodusv1.NodeConditionReady)
	})
	if !slices.ContainsFunc(beats(), func(names []string) bool { return slices.Contains(names, "agent-1") }) {
		t.Fatal("no beat named the reservation while it was live: the proxy saw no evidence")
	}
	// The beats after the cleaning: at least one more.
	seen := len(beats())
	if err := testfleet.Eventually(ctx(t), 30*time.Second, func(context.Context) (bool, error) { return len(beats()) > seen, nil }); err != nil {
		t.Fatal("no beat came after the cleaning")
	}
	for _, names := range beats()[seen:] {
		if slices.Contains(names, "agent-1") {
			t.Errorf("a beat after the release still names the released reservation: %v", names)
		}
	}
}
