package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/sshvalue"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestARemovedMemberLosesSSHAccessAtOnce: an SSH certificate lives up to an
// hour, and a host checks no membership, only the principal. So removing a
// member from a project, or making them a viewer, raises the epoch of the
// project's active hosts: every certificate issued before names a principal
// no host serves any more, and the members who stay get new ones (nodus ssh
// does when the epoch moves). Adding a member or renaming the project
// changes nobody's access, and no epoch.
func TestARemovedMemberLosesSSHAccessAtOnce(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	c := s.Client.NodusV1()
	now := time.Now()
	f.host(t, "gpu-1", now.Add(-time.Hour), now.Add(time.Hour))
	change := func(edit func(p *nodusv1.Project)) *nodusv1.Project {
		t.Helper()
		var out *nodusv1.Project
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := c.Projects().Get(ctx(t), "acme", metav1.GetOptions{})
			if err != nil {
				return err
			}
			edit(p)
			out, err = c.Projects().Update(ctx(t), p, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	without := func(name string) func(p *nodusv1.Project) {
		return func(p *nodusv1.Project) {
			var kept []nodusv1.ProjectMember
			for _, m := range p.Spec.Members {
				if m.Name != name {
					kept = append(kept, m)
				}
			}
			p.Spec.Members = kept
		}
	}
	waitEpoch := func(want int64) {
		t.Helper()
		if err := testfleet.Eventually(ctx(t), 30*time.Second, func(cx context.Context) (bool, error) {
			h, err := c.ReservedHosts("acme").Get(cx, "gpu-1", metav1.GetOptions{})
			return err == nil && h.Status.Reservation.Epoch == want, err
		}); err != nil {
			t.Fatalf("the host's epoch never became %d: %v; reservation %+v", want, err, f.reservation(t, "gpu-1").Status)
		}
	}
	epoch := f.reservation(t, "gpu-1").Status.Epoch

	// Nobody loses access: no revision, and the epoch stays.
	if p := change(func(p *nodusv1.Project) {
		p.Spec.DisplayName = "Acme Corp"
		p.Spec.Members = append(p.Spec.Members, nodusv1.ProjectMember{Name: "nina", Role: nodusv1.ProjectRoleMember})
	}); p.Status.AccessRevision != 0 {
		t.Errorf("adding a member and renaming the project made access revision %d", p.Status.AccessRevision)
	}
	// An update that sends a status of its own changes nothing of it.
	if p := change(func(p *nodusv1.Project) { p.Status.AccessRevision = 7 }); p.Status.AccessRevision != 0 {
		t.Errorf("a client set the access revision: %d", p.Status.AccessRevision)
	}

	cert := certificateFor(t, f.member, "acme", "gpu-1")
	if p := change(without("mary")); p.Status.AccessRevision != 1 {
		t.Errorf("removing a member: access revision %d, want 1", p.Status.AccessRevision)
	}
	waitEpoch(epoch + 1)
	r := f.reservation(t, "gpu-1")
	if current := sshvalue.Principal(r.Name, r.UID, r.Status.Epoch); cert.Principal == current {
		t.Errorf("the removed member's certificate still names the host's principal %s", current)
	}
	if got := do(t, f.member, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/gpu-1/ssh-certificate", "application/json",
		strings.NewReader(sshCertificateRequest(t))); got.code != http.StatusForbidden {
		t.Errorf("the removed member asked for a new certificate: %d %s", got.code, got.body)
	}
	if again := certificateFor(t, f.admin, "acme", "gpu-1"); again.Epoch != epoch+1 {
		t.Errorf("a member who stays gets a certificate of epoch %d, want %d", again.Epoch, epoch+1)
	}

	// A member made a viewer loses SSH too.
	if p := change(func(p *nodusv1.Project) {
		for i := range p.Spec.Members {
			if p.Spec.Members[i].Name == "nina" {
				p.Spec.Members[i].Role = nodusv1.ProjectRoleViewer
			}
		}
	}); p.Status.AccessRevision != 2 {
		t.Errorf("making a member a viewer: access revision %d, want 2", p.Status.AccessRevision)
	}
	waitEpoch(epoch + 2)
	// Removing a viewer takes nobody's SSH away.
	if p := change(without("victor")); p.Status.AccessRevision != 2 {
		t.Errorf("removing a viewer: access revision %d, want 2", p.Status.AccessRevision)
	}
	time.Sleep(time.Second) // what a needless epoch change would take
	if e := f.reservation(t, "gpu-1").Status.Epoch; e != epoch+2 {
		t.Errorf("removing a viewer moved the epoch to %d", e)
	}
}

// TestACertificateForAHostWhoseNodeIsGoneNamesNoNode: an operator deleted
// the node under an active reservation. A member's certificate request is
// refused as the provider's trouble, naming the host, never the node: node
// names are the supplier's, and a customer never sees them.
func TestACertificateForAHostWhoseNodeIsGoneNamesNoNode(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "supplier-rack7-n3")
	f.reserve(t, "web", nodusv1.ReservationPlacement{Node: "supplier-rack7-n3"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	f.waitHost(t, "web", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Reservation.State == nodusv1.ReservationStateActive
	})
	deleteGoneNode(t, s, "supplier-rack7-n3")
	r := do(t, f.member, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/web/ssh-certificate", "application/json",
		strings.NewReader(sshCertificateRequest(t)))
	// 409 with the provider's reason: a 503 told the member to retry
	// and to check the server.
	if env := envelopeOf(t, r); r.code != http.StatusConflict || env.Reason != apierror.ReasonNodeNotFound || strings.Contains(string(r.body), "supplier-rack7") {
		t.Errorf("a certificate for a host whose node is gone: %d %s, want 409 NodeNotFound naming no node", r.code, r.body)
	}
}

// TestAHostWithoutAnSSHAddressGivesNoCertificate: an agent that runs
// without --ssh-address reports a host key and no address. The certificate
// was issued with an empty address, which `nodus ssh` then refused as the
// server's fault, and the host showed a way to connect.
func TestAHostWithoutAnSSHAddressGivesNoCertificate(t *testing.T) {
	s := testserver.StartTestServer(t)
	// A node whose agent beats: Connected would be True but for the address.
	f := newLendingFleet(t, s, 1, nil, false)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := s.Client.NodusV1().Nodes().Get(ctx(t), "gpu-00", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.SSHAddress, n.Status.SSHHostKey = "", testfleet.HostKey("gpu-00")
		_, err = s.Client.NodusV1().Nodes().UpdateStatus(ctx(t), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	f.waitHost(t, "gpu-00", func(h *nodusv1.ReservedHost) bool {
		c := meta.FindStatusCondition(h.Status.Conditions, nodusv1.ReservedHostConditionConnected)
		return h.Status.Reservation.State == nodusv1.ReservationStateActive && c != nil && strings.Contains(c.Message, "SSHAddressUnknown") &&
			h.Status.Connect == nil
	})
	r := do(t, f.member, "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/gpu-00/ssh-certificate", "application/json",
		strings.NewReader(sshCertificateRequest(t)))
	if env := envelopeOf(t, r); r.code != http.StatusConflict || env.Reason != apierror.ReasonSSHAddressUnknown || !strings.Contains(env.Fix, "--ssh-address") {
		t.Errorf("a certificate for a host without an SSH address: %d %s", r.code, r.body)
	}
}
