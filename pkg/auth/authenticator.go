package auth

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
	"github.com/nodus-dev/nodus/pkg/registry/accesstoken"
	"github.com/nodus-dev/nodus/pkg/registry/enrollmenttoken"
	secretpkg "github.com/nodus-dev/nodus/pkg/registry/secret"
)

// TokenGetter reads AccessTokens and EnrollmentTokens by name. fresh asks
// for a read that sees every completed write, for tokens created a moment ago.
type TokenGetter interface {
	GetAccessToken(ctx context.Context, name string, fresh bool) (*nodusv1.AccessToken, error)
	GetEnrollmentToken(ctx context.Context, name string, fresh bool) (*nodusv1.EnrollmentToken, error)
}

// Fresh reads of tokens the cache does not hold: anyone may send a bearer
// token naming none, and each cost a read from etcd, before any in-flight
// limit. A token made a moment ago, which the cache has not seen yet, is
// read within this budget; past it, the cache is asked again every
// missPoll for up to missWait (a new token reaches it within milliseconds)
// before the token is refused.
const (
	missReadsPerSecond = 50
	missReadsBurst     = 100
	missWait           = time.Second
	missPoll           = 50 * time.Millisecond
)

var errInvalidToken = errors.New("invalid bearer token")

// PublicPaths are served to everyone, without credentials.
var PublicPaths = []string{"/healthz", "/livez", "/readyz", "/version", "/docs/errors", "/ca.crt", "/ssh-user-ca.pub"}

// IsPublicPath says whether path is one of PublicPaths or below one.
func IsPublicPath(path string) bool {
	for _, p := range PublicPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// NewAuthenticator authenticates client certificates of clientCAs, bearer
// AccessTokens, and lets requests for public paths through as anonymous.
// A request without credentials for any other path fails with 401.
func NewAuthenticator(clientCAs *x509.CertPool, tokens TokenGetter) authenticator.Request {
	certs := newX509(clientCAs)
	bearer := bearertoken.New(&tokenAuthenticator{tokens: tokens, now: time.Now,
		missReads: rate.NewLimiter(missReadsPerSecond, missReadsBurst), missWait: missWait})
	return union.New(newCertCache(certs), bearer, authenticator.RequestFunc(publicAnonymous))
}

// newX509 verifies client certificates of clientCAs and names their user.
func newX509(clientCAs *x509.CertPool) authenticator.Request {
	return x509request.New(x509.VerifyOptions{Roots: clientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		x509request.UserConversionFunc(func(chain []*x509.Certificate) (*authenticator.Response, bool, error) {
			subject := chain[0].Subject
			if subject.CommonName == "" {
				return nil, false, errors.New("client certificate has no common name")
			}
			groups := append([]string{}, subject.Organization...)
			groups = append(groups, GroupAuthenticated)
			info := &user.DefaultInfo{Name: subject.CommonName, Groups: groups}
			for _, unit := range subject.OrganizationalUnit {
				if g, ok := strings.CutPrefix(unit, "generation-"); ok {
					setExtra(info, ExtraAgentGeneration, g)
				}
				if uid, ok := strings.CutPrefix(unit, "node-uid-"); ok {
					setExtra(info, ExtraNodeUID, uid)
				}
			}
			return &authenticator.Response{User: info}, true, nil
		}))
}

func setExtra(info *user.DefaultInfo, key, value string) {
	if info.Extra == nil {
		info.Extra = map[string][]string{}
	}
	info.Extra[key] = append(info.Extra[key], value)
}

func publicAnonymous(req *http.Request) (*authenticator.Response, bool, error) {
	if !IsPublicPath(req.URL.Path) {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
}

type tokenAuthenticator struct {
	tokens    TokenGetter
	now       func() time.Time
	missReads *rate.Limiter
	missWait  time.Duration
}

// errTooManyMisses refuses a token the cache does not hold while unknown
// tokens come faster than missReadsPerSecond.
var errTooManyMisses = errors.New("bearer token unknown to the server's cache, and too many unknown tokens are being read now: retry in a moment")

// readMissing reads a token the cache did not hold: from etcd (fresh)
// within the budget, else from the cache again until missWait has passed.
func readMissing[T any](ctx context.Context, a *tokenAuthenticator, read func(fresh bool) (T, error)) (T, error) {
	if a.missReads.Allow() {
		return read(true)
	}
	var none T
	for waited := time.Duration(0); waited < a.missWait; waited += missPoll {
		select {
		case <-ctx.Done():
			return none, ctx.Err()
		case <-time.After(missPoll):
		}
		if t, err := read(false); !apierrors.IsNotFound(err) {
			return t, err
		}
	}
	return none, errTooManyMisses
}

func (a *tokenAuthenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	if rest, ok := strings.CutPrefix(token, enrollmenttoken.TokenPrefix); ok {
		return a.enrollment(ctx, rest)
	}
	name, secret, ok := accesstoken.SplitToken(token)
	if !ok {
		return nil, false, errInvalidToken
	}
	t, err := a.tokens.GetAccessToken(ctx, name, false)
	if apierrors.IsNotFound(err) {
		// The cache may not have seen a token created a moment ago.
		t, err = readMissing(ctx, a, func(fresh bool) (*nodusv1.AccessToken, error) { return a.tokens.GetAccessToken(ctx, name, fresh) })
	}
	if apierrors.IsNotFound(err) {
		return nil, false, errInvalidToken
	}
	if err != nil {
		return nil, false, err
	}
	want := t.Status.TokenHash
	if want == "" || subtle.ConstantTimeCompare([]byte(want), []byte(secretpkg.Hash(secret))) != 1 {
		return nil, false, errInvalidToken
	}
	if t.Spec.ExpiresAt != nil && !a.now().Before(t.Spec.ExpiresAt.Time) {
		return nil, false, errors.New("bearer token expired at " + t.Spec.ExpiresAt.Format(time.RFC3339))
	}
	if t.DeletionTimestamp != nil {
		// Revoked: a finalizer that keeps the object keeps no access.
		return nil, false, errInvalidToken
	}
	if validation.IsSystemName(t.Spec.User) || slices.ContainsFunc(t.Spec.Groups, validation.IsSystemName) {
		// Made before such names were refused: it would pass for the
		// server itself, or for Kubernetes.
		return nil, false, errInvalidToken
	}
	groups := append([]string{}, t.Spec.Groups...)
	groups = append(groups, GroupAuthenticated)
	return &authenticator.Response{User: &user.DefaultInfo{
		Name:   t.Spec.User,
		Groups: groups,
		Extra:  map[string][]string{ExtraAccessToken: {t.Name}, ExtraAccessTokenUID: {string(t.UID)}},
	}}, true, nil
}

// enrollment authenticates an unexpired enrollment token as an enroller,
// which may do nothing but enroll. A used token authenticates too: the
// enrollment decides, with the token's record, whether it is the agent it
// enrolled asking again for an answer it lost (and otherwise refuses with
// a reason, where an authentication failure could give none).
func (a *tokenAuthenticator) enrollment(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	name, plain, ok := accesstoken.SplitToken(token)
	if !ok {
		return nil, false, errInvalidToken
	}
	// The enrollment reads the token from etcd again and judges it there
	// (used, expired, the object authenticated here); the cache's copy
	// authenticates.
	t, err := a.tokens.GetEnrollmentToken(ctx, name, false)
	if apierrors.IsNotFound(err) {
		t, err = readMissing(ctx, a, func(fresh bool) (*nodusv1.EnrollmentToken, error) {
			return a.tokens.GetEnrollmentToken(ctx, name, fresh)
		})
	}
	if apierrors.IsNotFound(err) {
		return nil, false, errInvalidToken
	}
	if err != nil {
		return nil, false, err
	}
	if t.Status.TokenHash == "" || subtle.ConstantTimeCompare([]byte(t.Status.TokenHash), []byte(secretpkg.Hash(plain))) != 1 {
		return nil, false, errInvalidToken
	}
	if t.Spec.ExpiresAt != nil && !a.now().Before(t.Spec.ExpiresAt.Time) {
		return nil, false, errors.New("the enrollment token expired at " + t.Spec.ExpiresAt.Format(time.RFC3339))
	}
	if t.DeletionTimestamp != nil {
		// Revoked: a finalizer that keeps the object enrolls nothing.
		return nil, false, errInvalidToken
	}
	return &authenticator.Response{User: &user.DefaultInfo{
		Name: "nodus:enroller:" + name, Groups: []string{GroupEnrollers},
		Extra: map[string][]string{ExtraEnrollmentToken: {name}, ExtraEnrollmentTokenUID: {string(t.UID)}},
	}}, true, nil
}
