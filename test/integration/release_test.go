package integration

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodus-dev/nodus/pkg/actions"
	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/envelope"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

const agreed = `{"agreed":true,"epoch":1}`

func TestReleaseCapacity(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	term := func(name string) *nodusv1.ReservedHost {
		return f.host(t, name, now.Add(-time.Hour), now.Add(720*time.Hour))
	}

	// A client's User-Agent names the release's manager when it sends no
	// fieldManager. One with a control character is kept as Kubernetes
	// keeps it (without the character): a manager name Kubernetes refuses
	// would fail every write of the host, and the handover after it.
	t.Run("a user agent with a control character", func(t *testing.T) {
		term("h-agent")
		r := f.release(t, f.admin, "h-agent", agreed, "", "User-Agent", "evil\tclient\u200b/1.0")
		if r.code != http.StatusOK {
			t.Fatalf("got %d: %s", r.code, r.body)
		}
		f.waitHost(t, "h-agent", func(h *nodusv1.ReservedHost) bool {
			for _, m := range h.ManagedFields {
				if m.Subresource == "release-capacity" {
					if m.Manager != "evilclient" {
						t.Fatalf("the release's manager is %q, want evilclient", m.Manager)
					}
					return h.Status.Release != nil
				}
			}
			return false
		})
	})

	t.Run("success", func(t *testing.T) {
		before := term("h-ok")
		r := f.release(t, f.admin, "h-ok", agreed, "fieldManager=nodus-cli")
		if r.code != http.StatusOK {
			t.Fatalf("got %d: %s", r.code, r.body)
		}
		h := decodeHost(t, r)
		res := h.Status.Reservation
		if res.State != nodusv1.ReservationStateReleasing || res.Epoch != 2 || h.Status.Release == nil || h.Status.Release.RequestedAt.IsZero() {
			t.Errorf("answer does not show the release: %+v %+v", res, h.Status.Release)
		}
		if !res.EndsAt.Equal(&before.Status.Reservation.EndsAt) {
			t.Errorf("endsAt changed: %v -> %v", before.Status.Reservation.EndsAt, res.EndsAt)
		}
		if h.Status.Release.DrainedAt != nil {
			t.Errorf("drainedAt set without evidence")
		}
		if r.header.Get("ETag") != `"`+h.ResourceVersion+`"` {
			t.Errorf("ETag %q for resourceVersion %s", r.header.Get("ETag"), h.ResourceVersion)
		}
		stored := f.reservation(t, "h-ok")
		if stored.Status.State != nodusv1.ReservationStateReleasing || stored.Status.Epoch != 2 {
			t.Errorf("reservation not released: %+v", stored.Status)
		}
		var recorded bool
		for _, m := range h.ManagedFields {
			recorded = recorded || (m.Manager == "nodus-cli" && m.Subresource == "release-capacity" && m.Operation == metav1.ManagedFieldsOperationUpdate)
		}
		if !recorded {
			t.Errorf("managedFields lack the nodus-cli release entry: %+v", h.ManagedFields)
		}
		// The stored host, which only the reservation controller writes, shows the same.
		after := f.waitHost(t, "h-ok", func(h *nodusv1.ReservedHost) bool {
			if h.Status.Release == nil {
				return false
			}
			for _, m := range h.ManagedFields {
				if m.Manager == "nodus-cli" && m.Subresource == "release-capacity" && m.Time != nil && m.Time.Equal(&h.Status.Release.RequestedAt) {
					return h.Status.Reservation.State == nodusv1.ReservationStateReleasing && h.Status.Reservation.Epoch == 2
				}
			}
			return false
		})
		// Its other managers' entries stay: the controller's informer keeps
		// only the release entries, and adding one must not wipe the rest.
		if len(before.ManagedFields) == 0 {
			t.Fatalf("the host had no managedFields before the release")
		}
		for _, m := range before.ManagedFields {
			kept := false
			for _, a := range after.ManagedFields {
				kept = kept || (a.Manager == m.Manager && a.Operation == m.Operation && a.Subresource == m.Subresource)
			}
			if !kept {
				t.Errorf("the release dropped the managedFields entry of %s (%s, subresource %q): %+v", m.Manager, m.Operation, m.Subresource, after.ManagedFields)
			}
		}

		again := f.release(t, f.admin, "h-ok", `{"agreed":true,"epoch":2}`, "")
		expectReason(t, again, http.StatusConflict, apierror.ReasonAlreadyReleased)
	})

	t.Run("agreement and epoch", func(t *testing.T) {
		term("h-body")
		for body, reason := range map[string]string{
			`{"agreed":false,"epoch":1}`: string(apierror.ReasonReleaseNotAgreed),
			`{"epoch":1}`:                string(apierror.ReasonReleaseNotAgreed),
			`{"agreed":null,"epoch":1}`:  string(apierror.ReasonReleaseNotAgreed),
			`{"agreed":true}`:            string(apierror.ReasonEpochRequired),
		} {
			expectReason(t, f.release(t, f.admin, "h-body", body, ""), http.StatusUnprocessableEntity, metav1.StatusReason(reason))
		}
		stale := f.release(t, f.admin, "h-body", `{"agreed":true,"epoch":7}`, "")
		env := expectReason(t, stale, http.StatusConflict, apierror.ReasonEpochConflict)
		if env.Details == nil || len(env.Details.Causes) != 1 || env.Details.Causes[0].Message != "1" || env.Details.Causes[0].Type != "CurrentEpoch" {
			t.Errorf("the current epoch is not in details: %+v", env.Details)
		}
		if !strings.Contains(env.Fix, "Read the host again") {
			t.Errorf("fix does not tell the caller to re-read: %q", env.Fix)
		}
		if st := f.reservation(t, "h-body").Status; st.State != nodusv1.ReservationStateActive || st.Epoch != 1 {
			t.Errorf("a refused release changed the reservation: %+v", st)
		}
	})

	t.Run("who may release", func(t *testing.T) {
		term("h-who")
		for who, want := range map[string]int{"viewer": 403, "member": 403, "outsider": 403, "nobody": 401} {
			cfg := map[string]*rest.Config{"viewer": f.viewer, "member": f.member, "outsider": f.outsider, "nobody": f.nobody}[who]
			if r := f.release(t, cfg, "h-who", agreed, ""); r.code != want {
				t.Errorf("%s: got %d, want %d: %s", who, r.code, want, r.body)
			} else {
				envelopeOf(t, r)
			}
		}
		if r := f.release(t, f.s.Config, "h-who", agreed, "dryRun=All"); r.code != http.StatusOK {
			t.Errorf("operator: %d %s", r.code, r.body)
		}
	})

	t.Run("term ended", func(t *testing.T) {
		f.host(t, "h-short", now.Add(-time.Hour), time.Now().Add(2*time.Second))
		f.waitHost(t, "h-short", func(h *nodusv1.ReservedHost) bool {
			return h.Status.Reservation.State == nodusv1.ReservationStateEnding
		})
		expectReason(t, f.release(t, f.admin, "h-short", `{"agreed":true,"epoch":2}`, ""), http.StatusConflict, apierror.ReasonTermEnded)
	})

	t.Run("dryRun", func(t *testing.T) {
		term("h-dry")
		r := f.release(t, f.admin, "h-dry", agreed, "dryRun=All", "Idempotency-Key", "dry-key")
		if r.code != http.StatusOK || decodeHost(t, r).Status.Reservation.State != nodusv1.ReservationStateReleasing {
			t.Fatalf("dry run must show what would happen: %d %s", r.code, r.body)
		}
		if st := f.reservation(t, "h-dry").Status; st.State != nodusv1.ReservationStateActive || st.Epoch != 1 {
			t.Errorf("dry run persisted: %+v", st)
		}
		expectReason(t, f.release(t, f.admin, "h-dry", `{"agreed":true,"epoch":9}`, "dryRun=All"), http.StatusConflict, apierror.ReasonEpochConflict)
		if r := f.release(t, f.admin, "h-dry", agreed, "dryRun=Maybe"); r.code != http.StatusUnprocessableEntity {
			t.Errorf("bad dryRun value: %d %s", r.code, r.body)
		}
		// The dry run kept no record: the same key now performs the release.
		real := f.release(t, f.admin, "h-dry", agreed, "", "Idempotency-Key", "dry-key")
		if real.code != http.StatusOK || real.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("after a dry run the key must be fresh: %d %v", real.code, real.header)
		}
	})

	t.Run("fieldValidation", func(t *testing.T) {
		term("h-fv")
		unknown := `{"agreed":true,"epoch":1,"bogus":1}`
		duplicate := `{"agreed":true,"epoch":1,"epoch":1}`
		for _, tc := range []struct {
			mode, body string
			code       int
			warning    string
		}{
			{"Strict", unknown, 400, ""},
			{"Strict", duplicate, 400, ""},
			// Warning headers quote the text: 299 - "unknown field \"bogus\"".
			{"Warn", unknown, 200, `unknown field \"bogus\"`},
			{"Warn", duplicate, 200, `duplicate field \"epoch\"`},
			{"Ignore", unknown, 200, ""},
			{"Ignore", duplicate, 200, ""},
		} {
			r := f.release(t, f.admin, "h-fv", tc.body, "dryRun=All&fieldValidation="+tc.mode)
			if r.code != tc.code {
				t.Errorf("%s %s: got %d: %s", tc.mode, tc.body, r.code, r.body)
				continue
			}
			warnings := strings.Join(r.header.Values("Warning"), "; ")
			switch {
			case tc.code == 400 && !strings.Contains(string(r.body), "bogus") && !strings.Contains(string(r.body), `duplicate field \"epoch\"`):
				t.Errorf("%s: the error must name the field: %s", tc.mode, r.body)
			case tc.warning != "" && (!strings.Contains(warnings, tc.warning) || !strings.HasPrefix(warnings, "299 ")):
				t.Errorf("%s: want a 299 warning %q, got %q", tc.mode, tc.warning, warnings)
			case tc.mode == "Ignore" && warnings != "":
				t.Errorf("Ignore must be silent, got %q", warnings)
			}
		}
		if r := f.release(t, f.admin, "h-fv", agreed, "dryRun=All&fieldManager="+strings.Repeat("m", 129)); r.code != http.StatusUnprocessableEntity {
			t.Errorf("a 129-character fieldManager must be refused: %d %s", r.code, r.body)
		}
	})

	t.Run("If-Match", func(t *testing.T) {
		term("h-etag")
		get := do(t, f.viewer, "GET", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/h-etag", "", nil)
		etag := get.header.Get("ETag")
		if !strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, "W/") {
			t.Fatalf("GET must return a strong ETag, got %q", etag)
		}
		for header, want := range map[string]int{
			etag:                200,
			`"1", ` + etag:      200,
			`*`:                 200,
			`"999999"`:          412,
			"W/" + etag:         412,
			`not-a-quoted-etag`: 400,
		} {
			r := f.release(t, f.admin, "h-etag", agreed, "dryRun=All", "If-Match", header)
			if r.code != want {
				t.Errorf("If-Match %s: got %d, want %d: %s", header, r.code, want, r.body)
			}
			if want == 412 {
				expectReason(t, r, 412, apierror.ReasonPreconditionFailed)
			}
		}
	})

	t.Run("Idempotency-Key", func(t *testing.T) {
		term("h-idem")
		first := f.release(t, f.admin, "h-idem", agreed, "", "Idempotency-Key", `"retry-1"`)
		replay := f.release(t, f.admin, "h-idem", agreed, "", "Idempotency-Key", `retry-1`)
		if first.code != 200 || replay.code != 200 || string(first.body) != string(replay.body) {
			t.Fatalf("replay differs: %d %d\n%s\n%s", first.code, replay.code, first.body, replay.body)
		}
		if replay.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("only the replay is marked: first %q, replay %q", first.header.Get("Idempotent-Replayed"), replay.header.Get("Idempotent-Replayed"))
		}
		// The answer replayed is the first one, its ETag with it.
		if first.header.Get("ETag") == "" || replay.header.Get("ETag") != first.header.Get("ETag") {
			t.Errorf("the ETag of the answer: first %q, replay %q", first.header.Get("ETag"), replay.header.Get("ETag"))
		}
		if f.reservation(t, "h-idem").Status.Epoch != 2 {
			t.Errorf("a replay must not release again")
		}
		// A refusal for a stale If-Match is not kept: the retry its fix
		// asks for (the host read again, its new ETag), with the same key,
		// runs. It was replayed, 412, for a day.
		term("h-idem-stale")
		expectReason(t, f.release(t, f.admin, "h-idem-stale", agreed, "", "Idempotency-Key", "retry-2", "If-Match", `"999999"`), 412, apierror.ReasonPreconditionFailed)
		if fresh := f.release(t, f.admin, "h-idem-stale", agreed, "", "Idempotency-Key", "retry-2"); fresh.code != 200 || fresh.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("the corrected retry of a stale If-Match with its key: %d (replayed %q) %s", fresh.code, fresh.header.Get("Idempotent-Replayed"), fresh.body)
		}
		// The release carries a reference to its request's record, for a
		// retry after a crash (not the record's key, which names the caller).
		if got, want := f.reservation(t, "h-idem").Status.ReleaseRequest,
			actions.EffectRef(scopeKey("alice", "POST", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/h-idem/release-capacity", "retry-1")); got != want {
			t.Errorf("the release's request reference is %q, want %q", got, want)
		}
		expectReason(t, f.release(t, f.admin, "h-idem", `{"agreed":true,"epoch":2}`, "", "Idempotency-Key", "retry-1"),
			http.StatusUnprocessableEntity, apierror.ReasonIdempotencyKeyReused)
		expectReason(t, f.release(t, f.admin, "h-idem", agreed, "fieldManager=x", "Idempotency-Key", "retry-1"),
			http.StatusUnprocessableEntity, apierror.ReasonIdempotencyKeyReused)
		// Another caller's key of the same value is another key.
		if r := f.release(t, f.s.Config, "h-idem", agreed, "", "Idempotency-Key", "retry-1"); r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("keys must be scoped to the caller")
		}
		for _, bad := range []string{"has space", strings.Repeat("k", 256), `"unterminated`, "naïve"} {
			expectReason(t, f.release(t, f.admin, "h-idem", agreed, "", "Idempotency-Key", bad), http.StatusBadRequest, apierror.ReasonIdempotencyKeyInvalid)
		}
		// An error is replayed as well, naming the request that produced it.
		stale := f.release(t, f.admin, "h-idem", `{"agreed":true,"epoch":1}`, "", "Idempotency-Key", "stale-1")
		staleAgain := f.release(t, f.admin, "h-idem", `{"agreed":true,"epoch":1}`, "", "Idempotency-Key", "stale-1")
		a, b := expectReason(t, stale, 409, apierror.ReasonAlreadyReleased), envelopeOfReplay(t, staleAgain)
		if a.RequestID != b.RequestID || staleAgain.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replayed error must name the first request: %q vs %q", a.RequestID, b.RequestID)
		}
	})

	t.Run("Idempotency-Key in flight", func(t *testing.T) {
		term("h-flight")
		etcd, err := s.EtcdClient()
		if err != nil {
			t.Fatal(err)
		}
		defer etcd.Close()
		// Another replica is still running the first request with this key.
		path := "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/h-flight/release-capacity"
		store := idempotencyStore(etcd)
		if existing, err := store.Begin(ctx(t), scopeKey("alice", "POST", path, "slow-1"), fingerprint("", agreed)); err != nil || existing != nil {
			t.Fatalf("claiming the key: %v %v", existing, err)
		}
		r := f.release(t, f.admin, "h-flight", agreed, "", "Idempotency-Key", "slow-1")
		env := expectReason(t, r, http.StatusConflict, apierror.ReasonIdempotencyKeyInFlight)
		if r.header.Get("Retry-After") == "" || env.Details.RetryAfterSeconds < 1 {
			t.Errorf("no Retry-After: %v %+v", r.header, env.Details)
		}
		if f.reservation(t, "h-flight").Status.Epoch != 1 {
			t.Errorf("a request whose key is in flight must not run")
		}
	})
}

// TestIdempotencyKeySurvivesRestart releases with a key, restarts the server
// on the same data, and retries: the answer is the first one.
func TestIdempotencyKeySurvivesRestart(t *testing.T) {
	testserver.KeepLogs(t)
	dir := t.TempDir()
	s, err := testserver.Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, s)
	f.host(t, "h-restart", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	first := f.release(t, f.admin, "h-restart", agreed, "", "Idempotency-Key", "across-restart")
	s.Stop()
	if first.code != 200 {
		t.Fatalf("release: %d %s", first.code, first.body)
	}

	s2, err := testserver.Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Stop)
	f.s = s2
	f.admin = bearer(s2, f.admin.BearerToken)
	replay := f.release(t, f.admin, "h-restart", agreed, "", "Idempotency-Key", "across-restart")
	if replay.code != 200 || string(replay.body) != string(first.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("after a restart: %d %v\n%s", replay.code, replay.header, replay.body)
	}
}

// TestConcurrentReleases sends 50 releases of one host at once: exactly one
// takes effect and the epoch rises by exactly one.
func TestConcurrentReleases(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	for _, shared := range []bool{false, true} {
		name := fmt.Sprintf("race-shared-%v", shared)
		f.host(t, name, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		codes := make([]response, 50)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				key := fmt.Sprintf("own-%d", i)
				if shared {
					key = "one-shared-key"
				}
				codes[i] = f.release(t, f.admin, name, agreed, "", "Idempotency-Key", key)
			}(i)
		}
		wg.Wait()
		executed, replayed := 0, 0
		for _, r := range codes {
			switch {
			case r.code == 200 && r.header.Get("Idempotent-Replayed") == "true":
				replayed++
			case r.code == 200:
				executed++
			case r.code == 409:
				envelopeOf(t, r)
			default:
				t.Errorf("shared=%v: unexpected %d: %s", shared, r.code, r.body)
			}
		}
		if executed != 1 {
			t.Errorf("shared=%v: %d releases took effect, want exactly 1 (%d replays)", shared, executed, replayed)
		}
		if !shared && replayed != 0 {
			t.Errorf("own keys cannot replay, got %d", replayed)
		}
		if got := f.reservation(t, name).Status.Epoch; got != 2 {
			t.Errorf("shared=%v: epoch %d after the race, want 2", shared, got)
		}
	}
}

func expectReason(t *testing.T, r response, code int, reason metav1.StatusReason) envelope.Status {
	t.Helper()
	if r.code != code {
		t.Fatalf("got %d, want %d %s: %s", r.code, code, reason, r.body)
	}
	env := envelopeOf(t, r)
	if env.Reason != reason {
		t.Fatalf("reason %s, want %s: %s", env.Reason, reason, r.body)
	}
	return env
}

// TestAReleasedTermNoLongerChanges moves the term of a released
// reservation, as an operator extending it would: accepted, it made the
// controller's every write of the ReservedHost fail (a release never
// changes the host's term), and the node was never handed to cleaning.
func TestAReleasedTermNoLongerChanges(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	now := time.Now()
	f.host(t, "released", now.Add(-time.Hour), now.Add(time.Hour))
	if r := f.release(t, f.admin, "released", agreed, ""); r.code != 200 {
		t.Fatalf("release: %d %s", r.code, r.body)
	}
	c := s.Client.NodusV1().Reservations()
	for _, move := range []func(*nodusv1.Reservation){
		func(r *nodusv1.Reservation) { r.Spec.EndsAt = metav1.NewTime(r.Spec.EndsAt.Add(time.Hour)) },
		func(r *nodusv1.Reservation) { r.Spec.StartsAt = metav1.NewTime(r.Spec.StartsAt.Add(-time.Hour)) },
	} {
		r, err := c.Get(ctx(t), "released", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		move(r)
		if _, err := c.Update(ctx(t), r, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("a released reservation's term moved: %v", err)
		}
	}
	// Nor does its status go back: a patch of the status subresource (an
	// apply of a manifest saved before the release alike) made it active
	// again at its epoch, and the controller claimed its node again. (The
	// host shows the release once the controller projected it.)
	f.waitHost(t, "released", func(h *nodusv1.ReservedHost) bool { return h.Status.Release != nil })
	for _, patch := range []string{`{"status":{"state":"active","release":null}}`, `{"status":{"state":"active"}}`, `{"status":{"release":null}}`} {
		if r := do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/reservations/released/status", "application/merge-patch+json", strings.NewReader(patch)); r.code != http.StatusUnprocessableEntity {
			t.Errorf("a released reservation's status patched with %s: %d %s, want 422", patch, r.code, r.body)
		}
		if r := do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/released/status", "application/merge-patch+json", strings.NewReader(patch)); patch != `{"status":{"state":"active"}}` && r.code != http.StatusUnprocessableEntity {
			t.Errorf("a released host's status patched with %s: %d %s, want 422", patch, r.code, r.body)
		}
	}
	if got := f.reservation(t, "released"); got.Status.Release == nil || (got.Status.State != nodusv1.ReservationStateReleasing && got.Status.State != nodusv1.ReservationStateReleased) {
		t.Errorf("the released reservation after the patches: %+v", got.Status)
	}
	// Before a release the operator still extends the term.
	f.host(t, "kept", now.Add(-time.Hour), now.Add(time.Hour))
	r, err := c.Get(ctx(t), "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Spec.EndsAt = metav1.NewTime(r.Spec.EndsAt.Add(time.Hour))
	if _, err := c.Update(ctx(t), r, metav1.UpdateOptions{}); err != nil {
		t.Errorf("an extension: %v", err)
	}
}
