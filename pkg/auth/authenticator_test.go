package auth

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	secretpkg "github.com/nodus-dev/nodus/pkg/registry/secret"
)

// uncachedTokens holds tokens etcd has and the watch cache has not seen
// yet, and counts the fresh reads.
type uncachedTokens struct {
	stored     map[string]*nodusv1.AccessToken
	freshReads atomic.Int64
	// cachedAfter, when set, counts down the cache reads until the cache
	// holds the stored tokens.
	cachedAfter atomic.Int64
}

func (u *uncachedTokens) GetAccessToken(_ context.Context, name string, fresh bool) (*nodusv1.AccessToken, error) {
	if fresh {
		u.freshReads.Add(1)
		if t, ok := u.stored[name]; ok {
			return t, nil
		}
	} else if u.cachedAfter.Load() > 0 && u.cachedAfter.Add(-1) == 0 {
		return u.stored[name], nil
	}
	return nil, apierrors.NewNotFound(nodusv1.Resource("accesstokens"), name)
}

func (u *uncachedTokens) GetEnrollmentToken(_ context.Context, name string, fresh bool) (*nodusv1.EnrollmentToken, error) {
	if fresh {
		u.freshReads.Add(1)
	}
	return nil, apierrors.NewNotFound(nodusv1.Resource("enrollmenttokens"), name)
}

// TestUnknownTokensCostABoundedNumberOfReads: any caller may send bearer
// tokens that name no token, and each cost a read from etcd, where the
// watch cache did not have it. Those reads have a budget; a token made a
// moment ago is read within it.
func TestUnknownTokensCostABoundedNumberOfReads(t *testing.T) {
	tokens := &uncachedTokens{stored: map[string]*nodusv1.AccessToken{
		"new": {ObjectMeta: metav1.ObjectMeta{Name: "new", UID: "u1"}, Spec: nodusv1.AccessTokenSpec{User: "bob"},
			Status: nodusv1.AccessTokenStatus{TokenHash: secretpkg.Hash("s3cret")}},
	}}
	a := &tokenAuthenticator{tokens: tokens, now: time.Now, missReads: rate.NewLimiter(missReadsPerSecond, missReadsBurst)} // no wait for the cache
	if r, ok, err := a.AuthenticateToken(context.Background(), "new.s3cret"); !ok || err != nil || r.User.GetName() != "bob" {
		t.Fatalf("a token the cache has not seen yet: %v %v", ok, err)
	}
	start := time.Now()
	for i := range 2000 {
		for _, token := range []string{fmt.Sprintf("made-up-%d.x", i), fmt.Sprintf("enroll_made-up-%d.x", i)} {
			if _, ok, _ := a.AuthenticateToken(context.Background(), token); ok {
				t.Fatalf("%s authenticated", token)
			}
		}
	}
	allowed := missReadsBurst + 1 + int64(time.Since(start).Seconds()*missReadsPerSecond) + 1
	if n := tokens.freshReads.Load(); n > allowed {
		t.Errorf("4,000 unknown tokens cost %d reads from etcd; the budget allows %d", n, allowed)
	}
	// The budget spent, a token the cache does not hold is refused once the
	// cache was asked for a while; one the cache gets meanwhile is taken.
	if _, ok, err := a.AuthenticateToken(context.Background(), "new.s3cret"); ok || err != errTooManyMisses {
		t.Errorf("a token the cache has not seen, the budget spent: %v %v", ok, err)
	}
	a.missWait = time.Second
	tokens.cachedAfter.Store(3)
	start = time.Now()
	if r, ok, err := a.AuthenticateToken(context.Background(), "new.s3cret"); !ok || err != nil || r.User.GetName() != "bob" {
		t.Errorf("a token the cache gets a moment later, the budget spent: %v %v", ok, err)
	}
	if waited := time.Since(start); waited > 500*time.Millisecond {
		t.Errorf("the token the cache got waited %v", waited)
	}
}

// TestAStoredSystemNameAuthenticatesNoOne: the API refuses an AccessToken
// for a system: user or group, but one stored before it did (or written to
// etcd by other means) would pass for the server itself (system:masters)
// or for Kubernetes. The authenticator refuses it as it reads it.
func TestAStoredSystemNameAuthenticatesNoOne(t *testing.T) {
	hash := secretpkg.Hash("s3cret")
	stored := func(name, user string, groups ...string) *nodusv1.AccessToken {
		return &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
			Spec: nodusv1.AccessTokenSpec{User: user, Groups: groups}, Status: nodusv1.AccessTokenStatus{TokenHash: hash}}
	}
	tokens := &uncachedTokens{stored: map[string]*nodusv1.AccessToken{
		"plain":       stored("plain", "bob", "team-a"),
		"system-user": stored("system-user", "system:apiserver"),
		"masters":     stored("masters", "bob", "team-a", "system:masters"),
		"any-system":  stored("any-system", "bob", "system:serviceaccounts"),
	}}
	a := &tokenAuthenticator{tokens: tokens, now: time.Now, missReads: rate.NewLimiter(missReadsPerSecond, missReadsBurst)}
	if r, ok, err := a.AuthenticateToken(context.Background(), "plain.s3cret"); !ok || err != nil || r.User.GetName() != "bob" {
		t.Fatalf("a stored token of an ordinary user: %v %v", ok, err)
	}
	for _, name := range []string{"system-user", "masters", "any-system"} {
		if r, ok, err := a.AuthenticateToken(context.Background(), name+".s3cret"); ok {
			t.Errorf("stored token %q authenticated %s in %v (err %v)", name, r.User.GetName(), r.User.GetGroups(), err)
		}
	}
}
