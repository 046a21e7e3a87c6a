package revocation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/auth"
)

// decide answers every authorization with what it holds now.
type decide struct {
	decision authorizer.Decision
	err      error
}

func (d *decide) authorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return d.decision, "test", d.err
	})
}

// tokens holds the AccessTokens that exist.
type tokens map[string]*nodusv1.AccessToken

// t1 is the token serveWatch's watch authenticated with.
var t1 = &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{Name: "t1", UID: "uid-t1"}}

func (t tokens) GetAccessToken(_ context.Context, name string, _ bool) (*nodusv1.AccessToken, error) {
	if token, ok := t[name]; ok {
		return token, nil
	}
	return nil, apierrors.NewNotFound(nodusv1.Resource("accesstokens"), name)
}

// unreadable tokens answer nothing from the cache and fail in etcd.
type unreadable struct{}

func (unreadable) GetAccessToken(_ context.Context, name string, fresh bool) (*nodusv1.AccessToken, error) {
	if fresh {
		return nil, errors.New("etcdserver: request timed out")
	}
	return nil, apierrors.NewNotFound(nodusv1.Resource("accesstokens"), name)
}

// serveWatch runs one watch of alice's (through token t1) through w's
// filter and reports whether the watch's context was cut before it was
// served, and a way to see it cut later.
func serveWatch(t *testing.T, w *Watches) (cutAtStart bool, cut <-chan struct{}, release func()) {
	t.Helper()
	ctx := request.WithUser(context.Background(), &user.DefaultInfo{Name: "alice", Extra: map[string][]string{auth.ExtraAccessToken: {"t1"}, auth.ExtraAccessTokenUID: {"uid-t1"}}})
	ctx = request.WithRequestInfo(ctx, &request.RequestInfo{IsResourceRequest: true, Verb: "watch", APIGroup: nodusv1.GroupName,
		APIVersion: "v1", Namespace: "acme", Resource: "executions"})
	return serveRequest(t, w, httptest.NewRequest("GET", "/apis/nodus.dev/v1/namespaces/acme/executions?watch=1", nil).WithContext(ctx))
}

// serveRequest runs the watch req through w's filter, as serveWatch.
func serveRequest(t *testing.T, w *Watches, req *http.Request) (cutAtStart bool, cut <-chan struct{}, release func()) {
	t.Helper()
	started, done, stop := make(chan bool, 1), make(chan struct{}), make(chan struct{})
	go w.Filter(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		started <- req.Context().Err() != nil
		select {
		case <-req.Context().Done():
			close(done)
		case <-stop:
		}
	})).ServeHTTP(httptest.NewRecorder(), req)
	select {
	case cutAtStart = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was never served")
	}
	return cutAtStart, done, func() { close(stop) }
}

// TestAWatchWhoseRecheckFailsIsCut: a re-authorization that errs (etcd
// unreachable while the cache says "not a member") left the watch open,
// and nothing looked at it again until the project's next change.
func TestAWatchWhoseRecheckFailsIsCut(t *testing.T) {
	authz := &decide{decision: authorizer.DecisionAllow}
	w := &Watches{Authorizer: authz.authorizer(), Tokens: tokens{"t1": t1}}
	cutAtStart, cut, release := serveWatch(t, w)
	defer release()
	if cutAtStart {
		t.Fatal("an allowed watch was cut as it started")
	}
	authz.decision, authz.err = authorizer.DecisionNoOpinion, errors.New("etcd: context deadline exceeded")
	w.ProjectChanged("acme")
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("a watch whose re-authorization failed was left open")
	}
}

// TestAWatchWhoseAccessEndedAsItStartedIsCut: a token deleted, or a
// membership removed, between the request's authorization and the watch's
// registration found no watch to cut.
func TestAWatchWhoseAccessEndedAsItStartedIsCut(t *testing.T) {
	for name, w := range map[string]*Watches{
		"token deleted":      {Authorizer: (&decide{decision: authorizer.DecisionAllow}).authorizer(), Tokens: tokens{}},
		"token made again":   {Authorizer: (&decide{decision: authorizer.DecisionAllow}).authorizer(), Tokens: tokens{"t1": {ObjectMeta: metav1.ObjectMeta{UID: "uid-made-again"}}}},
		"token unknown":      {Authorizer: (&decide{decision: authorizer.DecisionAllow}).authorizer(), Tokens: unreadable{}},
		"membership removed": {Authorizer: (&decide{decision: authorizer.DecisionDeny}).authorizer(), Tokens: tokens{"t1": t1}},
	} {
		cutAtStart, _, release := serveWatch(t, w)
		release()
		if !cutAtStart {
			t.Errorf("%s: the watch was served uncut", name)
		}
	}
}

// TestAWatchOfATokenMadeAgainIsCut: an informer that missed a token's
// delete and create (a watch gap) sees one update whose UID changed, which
// left the old token's watches open.
func TestAWatchOfATokenMadeAgainIsCut(t *testing.T) {
	w := &Watches{Authorizer: (&decide{decision: authorizer.DecisionAllow}).authorizer(), Tokens: tokens{"t1": t1}}
	cutAtStart, cut, release := serveWatch(t, w)
	defer release()
	if cutAtStart {
		t.Fatal("an allowed watch was cut as it started")
	}
	w.tokenChanged(t1, t1.DeepCopy())
	select {
	case <-cut:
		t.Fatal("an update of the same token cut its watch")
	case <-time.After(100 * time.Millisecond):
	}
	madeAgain := t1.DeepCopy()
	madeAgain.UID = "uid-made-again"
	w.tokenChanged(t1, madeAgain)
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch of a token made again under its name was left open")
	}
}

// serveCertificateWatch runs one watch of user u through w's filter on a
// connection that presented certificates chain, and reports whether it
// was cut before it was served and a way to see it cut later.
func serveCertificateWatch(t *testing.T, w *Watches, u user.Info, chain ...*x509.Certificate) (cutAtStart bool, cut <-chan struct{}, release func()) {
	t.Helper()
	ctx := request.WithUser(context.Background(), u)
	ctx = request.WithRequestInfo(ctx, &request.RequestInfo{IsResourceRequest: true, Verb: "watch", APIGroup: nodusv1.GroupName,
		APIVersion: "v1", Resource: "nodes", Name: "gpu-1"})
	req := httptest.NewRequest("GET", "https://nodus.example/apis/nodus.dev/v1/nodes?watch=1&fieldSelector=metadata.name%3Dgpu-1", nil).WithContext(ctx)
	req.TLS = &tls.ConnectionState{PeerCertificates: chain}
	return serveRequest(t, w, req)
}

// TestAWatchEndsWithItsCertificate: a watch authenticated by a client
// certificate (an agent's, an operator's) streamed past the certificate's
// end until the watch timed out, up to an hour later, where a token's
// expiry cuts its watches on time.
func TestAWatchEndsWithItsCertificate(t *testing.T) {
	agent := &user.DefaultInfo{Name: auth.NodeUserPrefix + "gpu-1", Groups: []string{auth.GroupNodes, auth.GroupAuthenticated}}
	w := &Watches{Authorizer: (&decide{decision: authorizer.DecisionAllow}).authorizer(), Tokens: tokens{}}
	// Long enough that a loaded machine serves the watch before its end.
	const life = 2 * time.Second
	start := time.Now()
	// The certificates beside its own are the client's to choose, and do
	// not end its watch: only its own end does.
	cutAtStart, cut, release := serveCertificateWatch(t, w, agent,
		&x509.Certificate{NotAfter: start.Add(life)}, &x509.Certificate{NotAfter: start.Add(-time.Hour)})
	if cutAtStart {
		t.Fatal("a watch of a valid certificate was cut as it started")
	}
	select {
	case <-cut:
		if took := time.Since(start); took < life {
			t.Errorf("cut after %v, before the certificate ended (%v)", took, life)
		}
	case <-time.After(10 * time.Second):
		t.Error("the watch outlived its certificate")
	}
	release()

	// A token's watch over a connection that also presented a certificate
	// (one the server did not take: the token authenticated it) ends with
	// the token, not with that certificate.
	tokenUser := &user.DefaultInfo{Name: "alice", Extra: map[string][]string{auth.ExtraAccessToken: {"t1"}, auth.ExtraAccessTokenUID: {"uid-t1"}}}
	w = &Watches{Authorizer: (&decide{decision: authorizer.DecisionAllow}).authorizer(), Tokens: tokens{"t1": t1}}
	_, cut, release = serveCertificateWatch(t, w, tokenUser, &x509.Certificate{NotAfter: time.Now().Add(50 * time.Millisecond)})
	defer release()
	select {
	case <-cut:
		t.Error("a token's watch was cut at the end of a certificate that did not authenticate it")
	case <-time.After(500 * time.Millisecond):
	}
}
