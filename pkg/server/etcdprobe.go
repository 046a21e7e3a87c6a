package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// probe asks each member for a linearizable read until one answers: the
// connection's own errors (a refused TLS handshake, a missing client
// certificate, nothing listening) are clearer than the etcd client's
// deadline. It speaks gRPC, not HTTP's /health, because a member that
// serves HTTP on a port of its own (--listen-client-http-urls; the
// embedded one does) answers nothing else on its client port.
func probe(ctx context.Context, servers []string, tlsConfig *tls.Config, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var members []*probedMember
	for _, server := range servers {
		m, err := dialMember(server, tlsConfig)
		if err != nil {
			return err
		}
		defer m.conn.Close()
		members = append(members, m)
	}
	last := make([]error, len(members))
	for {
		for i, m := range members {
			if last[i] = m.read(ctx); last[i] == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			errs := make([]string, len(members))
			for i, m := range members {
				errs[i] = fmt.Sprintf("%s: %v", m.url, explainEtcdError(m.handshake(tlsConfig, last[i])))
			}
			return fmt.Errorf("etcd did not answer within %s: %s", timeout, strings.Join(errs, "; "))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

type probedMember struct {
	url  string
	host string
	tls  bool
	conn *grpc.ClientConn
}

func dialMember(server string, tlsConfig *tls.Config) (*probedMember, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("etcd server %q: not an http:// or https:// URL", server)
	}
	creds := insecure.NewCredentials()
	if u.Scheme == "https" {
		if tlsConfig == nil {
			tlsConfig = &tls.Config{}
		}
		creds = credentials.NewTLS(tlsConfig.Clone())
	}
	// Redial as often as the probe asks again, not after gRPC's growing
	// backoff, so that a member that comes up during the probe is seen.
	conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: 2 * time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("etcd server %q: %w", server, err)
	}
	return &probedMember{url: server, host: u.Host, tls: u.Scheme == "https", conn: conn}, nil
}

// handshake tells why a TLS member did not answer, when the TLS handshake
// is why: gRPC reports whatever its connection met last, and a member that
// refuses the client's certificate may close before gRPC reads its alert
// (a broken pipe). This handshake writes nothing after it and waits for
// the member's first record: the alert, or nothing from a member that
// accepted it and waits for the client. Otherwise it returns err.
func (m *probedMember) handshake(tlsConfig *tls.Config, err error) error {
	if !m.tls {
		return err
	}
	cfg := &tls.Config{}
	if tlsConfig != nil {
		cfg = tlsConfig.Clone()
	}
	cfg.NextProtos = []string{"h2"}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(m.host)
	}
	dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, dialErr := dialer.DialContext(ctx, "tcp", m.host)
	if dialErr != nil {
		var opErr *net.OpError
		if errors.As(dialErr, &opErr) && opErr.Op == "dial" || errors.Is(dialErr, context.DeadlineExceeded) {
			return err // not TLS's: nothing listening, no answer
		}
		return dialErr
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, readErr := conn.Read(make([]byte, 1)); readErr != nil && strings.Contains(readErr.Error(), "remote error: tls:") {
		return readErr
	}
	return err
}

// read is what etcd's own health check does: a linearizable read, which
// needs a leader. It fails fast (gRPC's default) with the connection's last
// error rather than waiting for a connection that cannot be made.
func (m *probedMember) read(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := etcdserverpb.NewKVClient(m.conn).Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("health"), Limit: 1})
	if errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
		return nil // it answered; the key is not ours to read
	}
	return err
}

func explainEtcdError(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "certificate required") || strings.Contains(msg, "bad certificate"):
		return fmt.Errorf("%w (etcd asks for a client certificate: give --etcd-certfile and --etcd-keyfile, signed by a CA etcd trusts)", err)
	case strings.Contains(msg, "unknown authority"):
		return fmt.Errorf("%w (give --etcd-cafile, the CA that signed etcd's serving certificate)", err)
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Errorf("%w (this etcd serves http://, not https://)", err)
	case status.Code(err) == codes.DeadlineExceeded:
		return fmt.Errorf("%w (no answer)", err)
	}
	return err
}
