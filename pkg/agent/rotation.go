package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/outcome"
)

// credential is the agent's client certificate, which renews itself two
// thirds into its validity with the same key. Every new connection
// presents the latest certificate; a renewal closes the open ones, so that
// none goes on with a certificate about to expire (informers watch again).
type credential struct {
	stateDir, node string
	key            *ecdsa.PrivateKey
	roots          *x509.CertPool // the server's CA
	current        atomic.Pointer[tls.Certificate]
	dialer         *connrotation.Dialer
	transport      *http.Transport
}

func loadCredential(stateDir, node string) (*credential, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(stateDir, fileCert), filepath.Join(stateDir, fileKey))
	if err != nil {
		return nil, fmt.Errorf("the agent credential in %s: %w", stateDir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the agent key in %s is not an ECDSA key", stateDir)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, err
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(stateDir, fileCA))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no CA certificate", filepath.Join(stateDir, fileCA))
	}
	c := &credential{stateDir: stateDir, node: node, key: key, roots: roots,
		dialer: connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)}
	c.current.Store(&pair)
	c.transport = utilnet.SetTransportDefaults(&http.Transport{
		DialContext: c.dialer.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.current.Load(), nil }},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
	})
	return c, nil
}

// notAfter is when the current certificate expires.
func (c *credential) notAfter() time.Time { return c.current.Load().Leaf.NotAfter }

// renewAt is two thirds into the current certificate's validity.
func (c *credential) renewAt() time.Time {
	leaf := c.current.Load().Leaf
	return leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3)
}

// renew has the server certify the agent's key again, stores the new
// certificate and makes every new connection use it.
func (c *credential) renew(ctx context.Context, client versioned.Interface) error {
	csr, err := certificateRequest(c.key)
	if err != nil {
		return err
	}
	answer, err := client.NodusV1().Nodes().Renew(ctx, c.node, &nodusv1.NodeEnrollment{CertificateRequest: csr}, metav1.CreateOptions{})
	if err != nil {
		return describe(err)
	}
	leaf, err := checkIssued([]byte(answer.Certificate), c.key, c.roots)
	if err != nil {
		return fmt.Errorf("the renewed certificate: %w", err)
	}
	if !leaf.NotAfter.After(c.notAfter()) {
		return errors.New("the renewed certificate expires no later than the current one")
	}
	// Only the certificate changes (the key stays): one atomic write leaves
	// a matching pair on disk whenever the agent stops.
	if err := atomicfile.Write(filepath.Join(c.stateDir, fileCert), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o600); err != nil {
		return err
	}
	c.current.Store(&tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: c.key, Leaf: leaf})
	c.dialer.CloseAll()
	return nil
}

// longestRenewalWait bounds the wait between renewals, and is the wait after
// a refused one, or once the certificate has expired: asking sooner cannot
// help then, since only an operator's new enrollment token can.
const longestRenewalWait = 5 * time.Minute

// renewCertificate renews the credential whenever it is two thirds through,
// retrying a failed renewal at a tenth of the remaining time (1 s to 5 min),
// and a refused one, or one past the certificate's end, after 5 min.
func (a *Agent) renewCertificate(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(a.cred.renewAt())):
		}
		for {
			err := a.cred.renew(ctx, a.client)
			if err == nil {
				klog.InfoS("renewed the agent certificate", "node", a.id.Node, "notAfter", a.cred.notAfter())
				break
			}
			retry := min(max(time.Until(a.cred.notAfter())/10, time.Second), longestRenewalWait)
			if outcome.Final(err) || !time.Now().Before(a.cred.notAfter()) {
				retry = longestRenewalWait
				klog.ErrorS(err, "the agent certificate cannot be renewed (refused, or expired): enroll this host again with a token issued for its node (nodus pools token POOL --node NODE, then nodusd enroll)",
					"node", a.id.Node, "expires", a.cred.notAfter(), "retryIn", retry)
			} else {
				klog.ErrorS(err, "renewing the agent certificate", "node", a.id.Node, "expires", a.cred.notAfter(), "retryIn", retry)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
		}
	}
}
