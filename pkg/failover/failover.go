// Package failover lets one API client use several nodus-server replicas:
// a request goes to the replica that answered last, and moves to the next
// one when a replica cannot be reached or says it is unavailable. It moves
// a request that may have reached the replica only when repeating it is
// safe: a read, a PUT or DELETE (fenced by resourceVersion), or an action
// with an Idempotency-Key, which the next replica answers from the same
// etcd record. It depends on nothing of Nodus, so that the CLI and the
// agent may use it.
package failover

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Servers parses a comma-separated list of https base URLs.
func Servers(list string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !isServer(strings.TrimSuffix(s, "/")) {
			return nil, fmt.Errorf("server %q is not an https URL of a nodus-server (https://HOST:PORT)", s)
		}
		out = append(out, strings.TrimSuffix(s, "/"))
	}
	if len(out) == 0 {
		return nil, errors.New("no server URL given")
	}
	return out, nil
}

// hostName is a DNS name, as hosts are named (underscores too).
var hostName = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?$`)

// isServer says whether s is https://HOST[:PORT] and nothing more, HOST a
// DNS name or an IP address. A server's URL goes into command lines the
// CLI prints for people to paste (nodusd enroll --server …, run as root),
// where a fragment, a user part or a host of other characters, which
// client-go ignores or sends on, would carry a shell command along.
func isServer(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || len(s) < len("https://") || s[len("https://"):] != u.Host {
		return false
	}
	if host := u.Hostname(); !hostName.MatchString(host) {
		if ip, err := netip.ParseAddr(host); err != nil || ip.Zone() != "" {
			return false
		}
	}
	if port := u.Port(); port != "" || strings.HasSuffix(u.Host, ":") {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	return true
}

// Transport sends each request to one of several servers.
type Transport struct {
	servers []*url.URL
	base    http.RoundTripper
	current atomic.Int32
}

// New spreads base over servers (as Servers returns them), first the first.
func New(servers []string, base http.RoundTripper) (*Transport, error) {
	t := &Transport{base: base}
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		t.servers = append(t.servers, u)
	}
	if len(t.servers) == 0 {
		return nil, errors.New("failover: no servers")
	}
	return t, nil
}

// Wrap is New for rest.Config.WrapTransport; with one server it is base.
func Wrap(servers []string) func(http.RoundTripper) http.RoundTripper {
	return func(base http.RoundTripper) http.RoundTripper {
		if len(servers) < 2 {
			return base
		}
		t, err := New(servers, base)
		if err != nil {
			return base
		}
		return t
	}
}

// RoundTrip tries the servers in turn, from the one that answered last.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := int(t.current.Load())
	var lastErr error
	for i := range t.servers {
		n := (start + i) % len(t.servers)
		attempt, err := t.onServer(req, t.servers[n], i > 0)
		if err != nil {
			return nil, err
		}
		resp, err := t.base.RoundTrip(attempt)
		last := i == len(t.servers)-1
		switch {
		case err == nil && resp.StatusCode == http.StatusServiceUnavailable && repeatable(req) && !last:
			// A replica shutting down or not ready: the next one answers.
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			lastErr = fmt.Errorf("%s: %s", t.servers[n].Host, resp.Status)
			continue
		case err == nil:
			t.current.Store(int32(n))
			return resp, nil
		case req.Context().Err() != nil:
			return nil, err
		case neverSent(err) || repeatable(req):
			lastErr = err
			continue
		default:
			return nil, err
		}
	}
	return nil, fmt.Errorf("no nodus-server answered: %w", lastErr)
}

// onServer is req addressed to server, with a fresh body for a repeat.
func (t *Transport) onServer(req *http.Request, server *url.URL, repeat bool) (*http.Request, error) {
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host = server.Scheme, server.Host
	r.Host = ""
	if repeat && req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, errors.New("failover: the request's body cannot be sent again")
		}
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	return r, nil
}

// repeatable says whether sending req again cannot do twice what it does.
func repeatable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != ""
}

// neverSent says whether err came before any byte of the request left:
// no connection, or a refused one.
func neverSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED)
}
