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

// certCache remembers the user of each client certificate that verified,
// until the first certificate of the chain it came with expires. It is
// keyed by the certificate alone: the user is the certificate's, and one
// that verified once is the CA's whatever certificates come beside it
// (keyed by the chain, an agent adding certificates of its own to it made
// a new entry per request). Verifying an
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
	key := sha256.Sum256(req.TLS.PeerCertificates[0].Raw)
	notAfter := req.TLS.PeerCertificates[0].NotAfter
	for _, cert := range req.TLS.PeerCertificates {
		if cert.NotAfter.Before(notAfter) {
			notAfter = cert.NotAfter
		}
	}
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
		// Still full: a tenth goes, chosen at random (a map's order), so
		// that a burst of new certificates (renewals in a loop) costs the
		// fleet's agents a verification each at most, not all at once.
		for k := range c.known {
			if len(c.known) < maxCachedCerts*9/10 {
				break
			}
			delete(c.known, k)
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
