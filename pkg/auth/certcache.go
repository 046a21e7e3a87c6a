package auth

import (
	"crypto/sha256"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// maxCachedCerts bounds the certificates remembered: one per agent of a
// large fleet, and its operators.
const maxCachedCerts = 50000

// certCache remembers the user of each client certificate chain that
// verified, until the first of its certificates expires. Verifying an
// ECDSA chain is most of what authenticating a request costs, and an agent
// sends the same certificate with every heartbeat. The roots do not change
// while the server runs, and an agent credential's retirement is decided
// per request by the authorizer (its generation), not here.
type certCache struct {
	verify authenticator.Request
	now    func() time.Time

	mu    sync.Mutex
	known map[[sha256.Size]byte]cachedCert
}

type cachedCert struct {
	user     user.Info
	notAfter time.Time
}

func newCertCache(verify authenticator.Request) *certCache {
	return &certCache{verify: verify, now: time.Now, known: map[[sha256.Size]byte]cachedCert{}}
}

func (c *certCache) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return c.verify.AuthenticateRequest(req)
	}
	h := sha256.New()
	notAfter := req.TLS.PeerCertificates[0].NotAfter
	for _, cert := range req.TLS.PeerCertificates {
		h.Write(cert.Raw)
		if cert.NotAfter.Before(notAfter) {
			notAfter = cert.NotAfter
		}
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	now := c.now()
	c.mu.Lock()
	hit, ok := c.known[key]
	c.mu.Unlock()
	if ok && now.Before(hit.notAfter) {
		return &authenticator.Response{User: copyUser(hit.user)}, true, nil
	}
	resp, ok, err := c.verify.AuthenticateRequest(req)
	if err != nil || !ok {
		return resp, ok, err
	}
	c.mu.Lock()
	if len(c.known) >= maxCachedCerts {
		for k, v := range c.known {
			if !now.Before(v.notAfter) {
				delete(c.known, k)
			}
		}
		if len(c.known) >= maxCachedCerts {
			clear(c.known)
		}
	}
	c.known[key] = cachedCert{user: copyUser(resp.User), notAfter: notAfter}
	c.mu.Unlock()
	return resp, ok, nil
}

// copyUser keeps what later filters may change out of the cache.
func copyUser(u user.Info) user.Info {
	extra := map[string][]string{}
	for k, v := range u.GetExtra() {
		extra[k] = slices.Clone(v)
	}
	return &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: slices.Clone(u.GetGroups()), Extra: extra}
}
