package actions

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/nodus-dev/nodus/pkg/idempotency"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// TestAnAnswerToTryAgainIsNotTheKeysAnswer: an action answered 429 (the
// watch cache still filling, a limit for now) or 408 did not finish; it may
// even have taken effect before the part that answered so (a withdrawal,
// then its drain's list). Kept as the key's answer, every retry under the
// key would be told the same for 24 hours and the rest never done. Such a
// key is released: the retry runs the action again. A final answer (here a
// 409) is kept and replayed.
func TestAnAnswerToTryAgainIsNotTheKeysAnswer(t *testing.T) {
	etcd, client, err := testfleet.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); etcd.Stop(context.Background()) })
	for _, tc := range []struct {
		first    int
		released bool
	}{{http.StatusTooManyRequests, true}, {http.StatusRequestTimeout, true}, {http.StatusConflict, false}} {
		calls := 0
		handler := WithActions(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			calls++
			code := http.StatusOK
			if calls == 1 {
				code = tc.first
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1"}`))
		}), idempotency.NewStore(client), Options{BodyLimits: map[string]int64{"reservedhosts/withdraw": 0}})
		key := fmt.Sprintf("retry-%d", tc.first)
		codes := []int{}
		for range 2 {
			req := httptest.NewRequest(http.MethodPost, "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/h1/withdraw", strings.NewReader(`{"epoch":1}`))
			req.Header.Set("Idempotency-Key", key)
			ctx := request.WithRequestInfo(req.Context(), &request.RequestInfo{IsResourceRequest: true, Verb: "create", APIGroup: "nodus.dev",
				Resource: "reservedhosts", Subresource: "withdraw", Namespace: "acme", Name: "h1"})
			ctx = request.WithUser(ctx, &user.DefaultInfo{Name: "ada"})
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req.WithContext(ctx))
			codes = append(codes, rec.Code)
		}
		switch {
		case tc.released && (calls != 2 || codes[1] != http.StatusOK):
			t.Errorf("a first answer %d: the retry under its key ran the action %d times in all and answered %v; want it run again", tc.first, calls, codes)
		case !tc.released && (calls != 1 || codes[1] != tc.first):
			t.Errorf("a first answer %d: the retry under its key ran the action %d times in all and answered %v; want the first answer replayed", tc.first, calls, codes)
		}
	}
}

// TestAnActionRecognisesItsOwnReferencesOnly: what an action stores with
// its effect names no caller, and a retry recognises its effect by it, or
// by the record key itself, which servers before session 51 stored; no
// other request's reference, and nothing without an Idempotency-Key.
func TestAnActionRecognisesItsOwnReferencesOnly(t *testing.T) {
	path := "/apis/nodus.dev/v1/namespaces/acme/reservedhosts/h/release-capacity"
	scope := ScopeKey("alice", "POST", path, "k1")
	ctx := context.WithValue(context.Background(), requestKeyContext{}, scope)
	ref := RequestKey(ctx)
	caller := CallerPrefix("alice", path)
	if ref == "" || strings.Contains(ref, strings.TrimSuffix(strings.TrimPrefix(caller, "acme/u-"), "/")) {
		t.Errorf("the reference %q names its caller (%s)", ref, caller)
	}
	own := Recognizer(ctx)
	for stored, want := range map[string]bool{
		ref: true, scope: true, "": false,
		RequestKey(context.WithValue(context.Background(), requestKeyContext{}, ScopeKey("alice", "POST", path, "k2"))): false,
		ScopeKey("bob", "POST", path, "k1"): false,
	} {
		if got := own(stored); got != want {
			t.Errorf("recognises %q: %v, want %v", stored, got, want)
		}
	}
	if RequestKey(context.Background()) != "" || Recognizer(context.Background())("") {
		t.Error("a request without an Idempotency-Key has a reference, or recognises one")
	}
}
