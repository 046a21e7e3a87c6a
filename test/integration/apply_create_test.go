package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestTokensAppliedIntoBeingCarryTheirSecret: a server-side apply
// (kubectl apply --server-side) of an AccessToken or EnrollmentToken that
// did not exist was made by the store's update, which generates no
// secret: it answered 201 without a token and stored one with no hash,
// which could never authenticate. Applied into being, a token is made as a
// POST makes it, and its answer carries the secret once.
func TestTokensAppliedIntoBeingCarryTheirSecret(t *testing.T) {
	s := testserver.StartTestServer(t)
	apply := func(path, body string, query string) response {
		return do(t, s.Config, "PATCH", "/apis/nodus.dev/v1/"+path+"?fieldManager=ops"+query, "application/apply-patch+yaml", strings.NewReader(body))
	}
	token := func(r response) string {
		var out struct {
			Status struct {
				Token string `json:"token"`
			} `json:"status"`
		}
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatalf("%s: %v", r.body, err)
		}
		return out.Status.Token
	}
	const accessToken = "apiVersion: nodus.dev/v1\nkind: AccessToken\nmetadata: {name: ci}\nspec: {user: ci-bot}\n"

	// A dry run makes nothing and shows no secret.
	if r := apply("accesstokens/ci", accessToken, "&dryRun=All"); r.code != http.StatusCreated || token(r) != "" {
		t.Errorf("a dry-run apply of a new access token: %d %s", r.code, r.body)
	}
	if _, err := s.Client.NodusV1().AccessTokens().Get(ctx(t), "ci", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a dry-run apply made the token: %v", err)
	}

	made := apply("accesstokens/ci", accessToken, "")
	secret := token(made)
	if made.code != http.StatusCreated || !strings.HasPrefix(secret, "ci.") {
		t.Fatalf("an apply that makes an access token: %d, token %q: %s", made.code, secret, made.body)
	}
	if who := do(t, bearer(s, secret), "GET", "/whoami", "", nil); who.code != http.StatusOK || !strings.Contains(string(who.body), `"ci-bot"`) {
		t.Errorf("the applied token authenticates: %d %s", who.code, who.body)
	}
	// Applied again, it is the same token: no new secret, the first still
	// holds.
	if again := apply("accesstokens/ci", accessToken, ""); again.code != http.StatusOK || token(again) != "" {
		t.Errorf("an apply of an existing access token: %d %s", again.code, again.body)
	}
	if who := do(t, bearer(s, secret), "GET", "/whoami", "", nil); who.code != http.StatusOK {
		t.Errorf("the token after it was applied again: %d %s", who.code, who.body)
	}

	enrollment := apply("enrollmenttokens/rack-1", "apiVersion: nodus.dev/v1\nkind: EnrollmentToken\nmetadata: {name: rack-1}\nspec: {pool: fra1, resourceClass: gpu-h100x8}\n", "")
	if secret := token(enrollment); enrollment.code != http.StatusCreated || !strings.Contains(secret, "rack-1.") || !strings.Contains(string(enrollment.body), `"caFingerprint":"sha256:`) {
		t.Errorf("an apply that makes an enrollment token: %d, token %q: %s", enrollment.code, secret, enrollment.body)
	}
	stored, err := s.Client.NodusV1().EnrollmentTokens().Get(ctx(t), "rack-1", metav1.GetOptions{})
	if err != nil || stored.Status.TokenHash == "" {
		t.Errorf("the applied enrollment token is stored without its hash: %v %+v", err, stored)
	}
}
