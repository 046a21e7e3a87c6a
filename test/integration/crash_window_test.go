package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodus-dev/nodus/pkg/actions"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestKeyedActionsAfterACrash plants, for each keyed owner action, the
// state a replica's kill -9 leaves behind — the action took effect (or
// not), its answer was never stored, its key is in flight on a replica
// process that is gone though its registration has not lapsed — and
// retries: the retry runs at once on this replica, recognises its own
// effect and answers it as a replay, and never applies an old intent over
// a later change.
func TestKeyedActionsAfterACrash(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	const node = "gpu-00"
	path := func(action string) string {
		return "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/" + node + "/" + action
	}
	epoch := f.reservation(t, node).Status.Epoch
	lendBody := fmt.Sprintf(`{"epoch":%d,"maxGPUs":3}`, epoch)
	withdrawBody := fmt.Sprintf(`{"epoch":%d}`, epoch)

	t.Run("a lend retried after a later withdrawal does not lend again", func(t *testing.T) {
		if r := f.lend(t, f.admin, "lend", node, lendBody, "Idempotency-Key", "lend-k1"); r.code != 200 {
			t.Fatalf("lend: %d %s", r.code, r.body)
		}
		cutAnswer(t, etcd, "alice", path("lend"), "lend-k1", lendBody, goneAddress(t))
		if r := f.lend(t, f.admin, "withdraw", node, withdrawBody, "Idempotency-Key", "withdraw-k2"); r.code != 200 {
			t.Fatalf("withdraw: %d %s", r.code, r.body)
		}
		before := f.reservation(t, node).Status.Lending
		r := f.lend(t, f.admin, "lend", node, lendBody, "Idempotency-Key", "lend-k1")
		if r.code != 200 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the retried lend must be answered as the replay of its effect: %d %v %s", r.code, r.header, r.body)
		}
		after := f.reservation(t, node).Status.Lending
		if after.Lent || !after.ChangedAt.Equal(&before.ChangedAt) {
			t.Errorf("the retry lent again over the later withdrawal: %+v, was %+v", after, before)
		}
	})

	t.Run("a withdrawal retried after its effect is a replay", func(t *testing.T) {
		cutAnswer(t, etcd, "alice", path("withdraw"), "withdraw-k2", withdrawBody, goneAddress(t))
		before := f.reservation(t, node).Status.Lending
		r := f.lend(t, f.admin, "withdraw", node, withdrawBody, "Idempotency-Key", "withdraw-k2")
		if r.code != 200 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the retried withdrawal: %d %v %s", r.code, r.header, r.body)
		}
		if after := f.reservation(t, node).Status.Lending; !after.ChangedAt.Equal(&before.ChangedAt) {
			t.Errorf("the retry changed the agreement: %+v, was %+v", after, before)
		}
	})

	t.Run("a lend cut before its effect runs again at once", func(t *testing.T) {
		cutAnswer(t, etcd, "alice", path("lend"), "lend-k3", lendBody, goneAddress(t))
		r := f.lend(t, f.admin, "lend", node, lendBody, "Idempotency-Key", "lend-k3")
		if r.code != 200 || r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("a cut lend must run again, not wait or replay: %d %v %s", r.code, r.header, r.body)
		}
		if l := f.reservation(t, node).Status.Lending; !l.Lent || l.MaxGPUs != 3 {
			t.Errorf("the lend did not take effect: %+v", l)
		}
	})

	t.Run("a key held by a replica that still runs is waited for", func(t *testing.T) {
		live, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()
		cutAnswer(t, etcd, "alice", path("lend"), "lend-k4", lendBody, live.Addr().String())
		r := f.lend(t, f.admin, "lend", node, lendBody, "Idempotency-Key", "lend-k4")
		expectReason(t, r, http.StatusConflict, apierror.ReasonIdempotencyKeyInFlight)
	})

	certBody := sshCertificateRequest(t)
	certify := func(key string) (response, string) {
		r := do(t, f.admin, "POST", path("ssh-certificate"), "application/json", strings.NewReader(certBody), "Idempotency-Key", key)
		var answer nodusv1.ReservedHostSSHCertificate
		if r.code != 200 || json.Unmarshal(r.body, &answer) != nil || answer.Certificate == "" {
			t.Fatalf("ssh-certificate: %d %s", r.code, r.body)
		}
		return r, answer.Certificate
	}

	t.Run("an SSH certificate a client saw is the one its retry gets", func(t *testing.T) {
		store := idempotencyStore(etcd)
		for i := range 10 {
			key := fmt.Sprintf("cert-%d", i)
			_, first := certify(key)
			// Had this replica died now, the retry would have to give
			// this very certificate: its answer must be stored already.
			record, err := store.Get(ctx(t), scopeKey("alice", "POST", path("ssh-certificate"), key))
			if err != nil || record == nil || record.InFlight() {
				t.Fatalf("the answer of %s reached the client before it was stored: %+v %v", key, record, err)
			}
			r, again := certify(key)
			if again != first || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("the retry of %s got another certificate", key)
			}
		}
	})

	t.Run("an SSH certificate cut before its answer was stored is issued at once", func(t *testing.T) {
		cutAnswer(t, etcd, "alice", path("ssh-certificate"), "cert-cut", certBody, goneAddress(t))
		if r, _ := certify("cert-cut"); r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("nothing was answered before: the retry must not be a replay")
		}
	})

	// The CLI fences each action with If-Match and retries it with the same
	// headers. By the retry the host may have a new version, made by the
	// action's own effect (a release) or by anything else: a retry whose
	// effect is recorded is still its replay, never a 412.
	etag := func(t *testing.T) string {
		t.Helper()
		h, err := f.s.Client.NodusV1().ReservedHosts("acme").Get(ctx(t), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return `"` + h.ResourceVersion + `"`
	}
	fenced := func(t *testing.T, action, body, key string, moveOn func(t *testing.T)) {
		t.Helper()
		reviewed := etag(t)
		send := func() response {
			return do(t, f.admin, "POST", path(action), "application/json", strings.NewReader(body),
				"Idempotency-Key", key, "If-Match", reviewed)
		}
		if r := send(); r.code != 200 {
			t.Fatalf("%s: %d %s", action, r.code, r.body)
		}
		moveOn(t)
		if now := etag(t); now == reviewed {
			t.Fatalf("the host is still at %s: the retry would not meet a moved host", now)
		}
		cutAnswer(t, etcd, "alice", path(action), key, body, goneAddress(t))
		if r := send(); r.code != 200 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the retried %s, with the If-Match it was first sent with: %d %v %s", action, r.code, r.header, r.body)
		}
	}
	// extendTerm moves the host on by what the operator does: a later end.
	extendTerm := func(t *testing.T) {
		t.Helper()
		var endsAt metav1.Time
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			r := f.reservation(t, node)
			r.Spec.EndsAt = metav1.NewTime(r.Spec.EndsAt.Add(time.Hour))
			endsAt = r.Spec.EndsAt
			_, err := f.s.Client.NodusV1().Reservations().Update(ctx(t), r, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		f.waitHost(t, node, func(h *nodusv1.ReservedHost) bool { return h.Status.Reservation.EndsAt.Equal(&endsAt) })
	}

	t.Run("a withdrawal retried with its If-Match after the host moved on is a replay", func(t *testing.T) {
		fenced(t, "withdraw", withdrawBody, "withdraw-k6", extendTerm)
		if l := f.reservation(t, node).Status.Lending; l.Lent {
			t.Errorf("the withdrawal is not in effect: %+v", l)
		}
	})

	t.Run("a lend retried with its If-Match after the host moved on is a replay", func(t *testing.T) {
		fenced(t, "lend", lendBody, "lend-k7", extendTerm)
		if l := f.reservation(t, node).Status.Lending; !l.Lent || l.MaxGPUs != 3 {
			t.Errorf("the lend is not in effect: %+v", l)
		}
	})

	// Under a key that made no change, a version the client did not review
	// is refused as before.
	t.Run("another key with an If-Match the host moved past is refused", func(t *testing.T) {
		stale := etag(t)
		extendTerm(t)
		r := do(t, f.admin, "POST", path("withdraw"), "application/json", strings.NewReader(withdrawBody),
			"Idempotency-Key", "withdraw-k8", "If-Match", stale)
		expectReason(t, r, http.StatusPreconditionFailed, apierror.ReasonPreconditionFailed)
		if l := f.reservation(t, node).Status.Lending; !l.Lent {
			t.Errorf("the refused withdrawal took effect: %+v", l)
		}
	})

	t.Run("a release retried with its If-Match after its effect is a replay", func(t *testing.T) {
		body := fmt.Sprintf(`{"agreed":true,"epoch":%d}`, epoch)
		fenced(t, "release-capacity", body, "release-k5", func(t *testing.T) {
			// The release itself moves the host: a new epoch.
			f.waitHost(t, node, func(h *nodusv1.ReservedHost) bool { return h.Status.Reservation.Epoch == epoch+1 })
		})
		if got := f.reservation(t, node).Status.Epoch; got != epoch+1 {
			t.Errorf("released twice: epoch %d", got)
		}
	})

	if n := len(f.reservation(t, node).Status.LendingRequests); n != 5 {
		t.Errorf("the reservation keeps %d lending request keys, want the five that took effect", n)
	}
}

// cutAnswer leaves key's record as a crash of the replica running its
// request would: in flight, owned by a replica process whose registration
// is still there but which listens at address no more.
func cutAnswer(t *testing.T, etcd *clientv3.Client, user, path, key, body, address string) {
	t.Helper()
	scope := scopeKey(user, "POST", path, key)
	crashed := idempotencyStore(etcd)
	if err := crashed.Abandon(ctx(t), scope); err != nil {
		t.Fatal(err)
	}
	if err := crashed.Register(ctx(t), "crashed-replica", address); err != nil {
		t.Fatal(err)
	}
	if existing, err := crashed.Begin(ctx(t), scope, fingerprint("", body)); err != nil || existing != nil {
		t.Fatalf("claiming %s: %+v %v", key, existing, err)
	}
}

// goneAddress is a loopback port that refuses connections: a process
// listened there and is gone.
func goneAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestAReservationNamesNoCallerOfItsKeyedActions: a keyed lend or release
// stores a reference to its Idempotency-Key record on the Reservation, to
// know its own effect when a crash cut its answer. The node's agent reads
// that Reservation, and a tenant with root on the host may have copied its
// credential: the reference must not name who acted. It held the record's
// key, which begins with a digest of the caller's name, unsalted: a
// dictionary of names told a later tenant who lent or released the host.
func TestAReservationNamesNoCallerOfItsKeyedActions(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newLendingFleet(t, s, 1, map[string]int32{"beta": 8}, false)
	const node = "gpu-00"
	epoch := f.reservation(t, node).Status.Epoch
	if r := f.lend(t, f.admin, "lend", node, fmt.Sprintf(`{"epoch":%d,"maxGPUs":3}`, epoch), "Idempotency-Key", "lend-1"); r.code != 200 {
		t.Fatalf("lend: %d %s", r.code, r.body)
	}
	epoch = f.reservation(t, node).Status.Epoch
	if r := f.release(t, f.admin, node, fmt.Sprintf(`{"agreed":true,"epoch":%d}`, epoch), "", "Idempotency-Key", "release-1"); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	// As the node's agent reads it.
	agent := versioned.NewForConfigOrDie(f.agents[node])
	list, err := agent.NodusV1().Reservations().List(ctx(t), metav1.ListOptions{FieldSelector: "status.node=" + node})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the agent's list of its node's reservations: %v, %v", list, err)
	}
	res := list.Items[0]
	if res.Status.ReleaseRequest == "" || len(res.Status.LendingRequests) != 1 {
		t.Fatalf("the keyed release and lend left no reference for their retries: %q, %q", res.Status.ReleaseRequest, res.Status.LendingRequests)
	}
	// The caller's part of a record key: acme/u-DIGEST/.
	caller := strings.TrimSuffix(strings.TrimPrefix(actions.CallerPrefix("alice", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/"+node+"/lend"), "acme/u-"), "/")
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), caller) {
		t.Errorf("the agent reads a digest of the caller's name (%s) on the reservation: releaseRequest %q, lendingRequests %q",
			caller, res.Status.ReleaseRequest, res.Status.LendingRequests)
	}
}
