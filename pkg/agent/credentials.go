// Package agent is nodusd: it enrolls a host, reports its inventory and
// heartbeats, watches the access state of the reservations on it and
// applies it fenced by epoch.
package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodus-dev/nodus/pkg/agent/state"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/failover"
)

// Files in the state directory.
const (
	fileKey    = "agent.key"
	fileCert   = "agent.crt"
	fileCA     = "ca.crt"
	fileConfig = "agent.json"
	fileState  = "state.db"
	// filePendingKey holds the key an enrollment asks for until it has its
	// certificate: an enrollment token records the key it enrolled, so a
	// `nodusd enroll` whose answer was lost asks again with this key, and
	// gets that enrollment's answer.
	filePendingKey = "enroll.key"
)

// enrollTries is how often one `nodusd enroll` sends its request when no
// answer comes back, and enrollPause the pause before the first repeat,
// doubled before each next.
const (
	enrollTries = 5
	enrollPause = time.Second
)

// identity is what enrollment leaves in the state directory.
type identity struct {
	// Server is the first of Servers, which older agents kept alone.
	Server string `json:"server"`
	// Servers are the replicas the agent moves between.
	Servers         []string `json:"servers,omitempty"`
	Node            string   `json:"node"`
	AgentGeneration int64    `json:"agentGeneration"`
}

// EnrollOptions are `nodusd enroll`'s inputs.
type EnrollOptions struct {
	// Server is one nodus-server URL, or several replicas' comma-separated.
	Server   string
	Token    string
	CAFile   string // trust this CA, or
	CAHash   string // fetch the CA from the server and pin its sha256 fingerprint
	Node     string
	StateDir string
}

// Enroll has the server sign the agent's key with the enrollment token,
// and stores the credential (0600) in the state directory. The key is
// kept there (enroll.key) from before the request until the credential is
// stored: the token is bound to it, so a request whose answer was lost is
// sent again, by this call or by the next `nodusd enroll`, and answered.
func Enroll(ctx context.Context, o EnrollOptions) (int64, error) {
	if o.Server == "" || o.Token == "" || o.Node == "" || o.StateDir == "" {
		return 0, errors.New("enroll needs --server, --token, a node name and --state-dir")
	}
	servers, err := failover.Servers(o.Server)
	if err != nil {
		return 0, fmt.Errorf("--server: %w", err)
	}
	caPEM, err := trustedCA(ctx, o, servers)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return 0, err
	}
	owed, err := cleaningOwed(o.StateDir)
	if err != nil {
		return 0, err
	}
	key, keyPEM, err := pendingKey(o.StateDir)
	if err != nil {
		return 0, err
	}
	csr, err := certificateRequest(key)
	if err != nil {
		return 0, err
	}
	// The token goes only to a server that proves itself with the pinned CA.
	client, err := newClient(&rest.Config{Host: servers[0], BearerToken: o.Token, Timeout: time.Minute,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}, WrapTransport: failover.Wrap(servers)})
	if err != nil {
		return 0, err
	}
	answer, err := enrollAsking(ctx, func(ctx context.Context) (*nodusv1.NodeEnrollment, error) {
		return client.NodusV1().Nodes().Enroll(ctx, o.Node, &nodusv1.NodeEnrollment{CertificateRequest: csr, CleaningOwed: owed}, metav1.CreateOptions{})
	}, enrollPause)
	if err != nil {
		return 0, err
	}
	switch {
	case owed && answer.CleaningOwed:
		klog.InfoS("the node is cleaned before anyone claims it", "node", o.Node)
	case owed:
		klog.InfoS("WARNING: the server does not hold the node back for the cleaning owed (a server before session 60, or a node a reservation holds): put the node in maintenance and clean it (nodus nodes clean) before anyone else claims it (docs/nodusd.md)", "node", o.Node)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return 0, errors.New("the server's CA is not a PEM certificate")
	}
	if _, err := checkIssued([]byte(answer.Certificate), key, roots); err != nil {
		return 0, fmt.Errorf("enrollment answer: %w", err)
	}
	id, _ := json.Marshal(identity{Server: servers[0], Servers: servers, Node: o.Node, AgentGeneration: answer.AgentGeneration})
	// The pending key goes last: until every file is written, the next
	// `nodusd enroll` asks again with it.
	for _, f := range []struct {
		name    string
		content []byte
	}{{fileKey, keyPEM}, {fileCert, []byte(answer.Certificate)}, {fileCA, caPEM}, {fileConfig, id}} {
		if err := atomicfile.Write(filepath.Join(o.StateDir, f.name), f.content, 0o600); err != nil {
			return 0, err
		}
	}
	if err := os.Remove(filepath.Join(o.StateDir, filePendingKey)); err != nil {
		return 0, err
	}
	return answer.AgentGeneration, nil
}

// cleaningOwed says whether the state directory records a tenant's access
// that no cleaning has discharged: the machine is enrolled again with its
// state kept, and the server is to clean it before anyone claims it. A
// database a running nodusd holds cannot be read, and is taken as owing.
func cleaningOwed(stateDir string) (bool, error) {
	owed, err := state.OwedIn(filepath.Join(stateDir, fileState))
	if errors.Is(err, state.ErrLocked) {
		klog.InfoS("a running nodusd holds the state database: the enrollment says that a cleaning is owed", "stateDir", stateDir)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading whether the state directory owes a cleaning: %w", err)
	}
	if owed {
		klog.InfoS("the state directory records a tenant's access that no cleaning discharged yet", "stateDir", stateDir)
	}
	return owed, nil
}

// pendingKey is the key an enrollment in stateDir asks for: the one kept
// from an earlier `nodusd enroll` that got no answer, or a new one, kept
// (0600) before it is sent.
func pendingKey(stateDir string) (*ecdsa.PrivateKey, []byte, error) {
	path := filepath.Join(stateDir, filePendingKey)
	if keyPEM, err := os.ReadFile(path); err == nil {
		if block, _ := pem.Decode(keyPEM); block != nil && block.Type == "EC PRIVATE KEY" {
			if key, err := x509.ParseECPrivateKey(block.Bytes); err == nil && key.Curve == elliptic.P256() {
				return key, keyPEM, nil
			}
		}
		// A key cut short by a crash was never sent: a new one replaces it.
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := atomicfile.Write(path, keyPEM, 0o600); err != nil {
		return nil, nil, err
	}
	return key, keyPEM, nil
}

// enrollAsking sends the enrollment until an answer comes back: a refusal,
// or the credential. It sends it again when the answer may have been lost
// on the way (no answer, a gateway's or an unavailable server's 5xx, 429):
// the server answers the key its token enrolled with that enrollment.
func enrollAsking(ctx context.Context, send func(context.Context) (*nodusv1.NodeEnrollment, error), pause time.Duration) (*nodusv1.NodeEnrollment, error) {
	var err error
	for try := 1; ; try++ {
		var answer *nodusv1.NodeEnrollment
		if answer, err = send(ctx); err == nil {
			return answer, nil
		}
		if !answerMayBeLost(err) {
			return nil, fmt.Errorf("enrollment refused: %w", describe(err))
		}
		if try == enrollTries {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("enrollment: %w (last: %v)%s", ctx.Err(), describe(err), askAgain)
		case <-time.After(pause):
		}
		pause *= 2
	}
	return nil, fmt.Errorf("enrollment: no answer after %d tries (last: %w)%s", enrollTries, describe(err), askAgain)
}

// askAgain tells an operator whose enrollment got no answer what to do.
const askAgain = "; run the same `nodusd enroll` again on this host with the same --state-dir: it asks again with the key kept in " +
	filePendingKey + ", which the token is bound to"

// answerMayBeLost says whether err leaves open that the server enrolled
// the node and its answer did not arrive.
func answerMayBeLost(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // no HTTP answer at all
	}
	code := status.Status().Code
	return code >= 500 || code == http.StatusTooManyRequests
}

// describe renders an API refusal with its status code, reason and message.
func describe(err error) error {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err
	}
	s := status.Status()
	return fmt.Errorf("%d %s: %w", s.Code, s.Reason, err)
}

func certificateRequest(key *ecdsa.PrivateKey) (string, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), nil
}

// checkIssued parses a certificate the server issued for key: the agent
// stores nothing it would fail with at its next call, so the certificate
// must be a client certificate of the server's CA (roots).
func checkIssued(certPEM []byte, key *ecdsa.PrivateKey, roots *x509.CertPool) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("the certificate is not for this agent's key")
	}
	// Checked at its start: whether it is valid now is the server's to
	// judge, by the server's clock, not this host's.
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: cert.NotBefore,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("the certificate is not a client certificate of the server's CA: %w", err)
	}
	return cert, nil
}

// trustedCA returns the CA to trust: the file, or the server's CA if its
// fingerprint matches the pinned one.
func trustedCA(ctx context.Context, o EnrollOptions, servers []string) ([]byte, error) {
	if o.CAFile != "" {
		return os.ReadFile(o.CAFile)
	}
	if o.CAHash == "" {
		return nil, errors.New("pin the server: give --ca-file or --ca-hash (printed with the enrollment token)")
	}
	// The CA is public; what makes it trusted is the fingerprint the operator handed over.
	transport, err := failover.New(servers, &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}})
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: transport}
	req, err := http.NewRequestWithContext(ctx, "GET", servers[0]+"/ca.crt", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	caPEM, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	block, rest := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the server's /ca.crt is not a PEM certificate")
	}
	// The pin names one certificate; a bundle would pass it with whatever
	// else it holds, so only a single certificate is accepted.
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("the server's /ca.crt holds more than one certificate: the pin names exactly one, refusing to enroll")
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return nil, fmt.Errorf("the server's /ca.crt: %w", err)
	}
	sum := sha256.Sum256(block.Bytes)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != o.CAHash {
		return nil, fmt.Errorf("the server's CA fingerprint is %s, not the pinned %s: refusing to enroll", got, o.CAHash)
	}
	// Exactly what the pin names is trusted: the one pinned certificate,
	// never whatever else the served bundle holds.
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}), nil
}

// clientConfig is the agent's API client configuration from its state
// directory, with the credential that renews itself.
// servers, when given, replace the replicas of the enrollment.
func clientConfig(stateDir string, servers []string) (*rest.Config, identity, *credential, error) {
	var id identity
	data, err := os.ReadFile(filepath.Join(stateDir, fileConfig))
	if err != nil {
		return nil, id, nil, fmt.Errorf("not enrolled (run nodusd enroll): %w", err)
	}
	if err := json.Unmarshal(data, &id); err != nil {
		return nil, id, nil, err
	}
	cred, err := loadCredential(stateDir, id.Node)
	if err != nil {
		return nil, id, nil, err
	}
	if len(servers) == 0 {
		if servers = id.Servers; len(servers) == 0 {
			servers = []string{id.Server}
		}
	}
	return &rest.Config{Host: servers[0], Transport: cred.transport, WrapTransport: failover.Wrap(servers), QPS: 50, Burst: 100}, id, cred, nil
}
