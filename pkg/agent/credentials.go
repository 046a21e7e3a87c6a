// Package agent is nodusd: it enrolls a host, reports its inventory and
// heartbeats, watches the access state of the reservations on it and
// applies it fenced by epoch.
package agent

import (
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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/pki"
)

// Files in the state directory.
const (
	fileKey    = "agent.key"
	fileCert   = "agent.crt"
	fileCA     = "ca.crt"
	fileConfig = "agent.json"
	fileState  = "state.db"
)

// identity is what enrollment leaves in the state directory.
type identity struct {
	Server          string `json:"server"`
	Node            string `json:"node"`
	AgentGeneration int64  `json:"agentGeneration"`
}

// EnrollOptions are `nodusd enroll`'s inputs.
type EnrollOptions struct {
	Server   string
	Token    string
	CAFile   string // trust this CA, or
	CAHash   string // fetch the CA from the server and pin its sha256 fingerprint
	Node     string
	StateDir string
}

// Enroll creates a key, has the server sign it with the enrollment token,
// and stores the credential (0600) in the state directory.
func Enroll(ctx context.Context, o EnrollOptions) (int64, error) {
	if o.Server == "" || o.Token == "" || o.Node == "" || o.StateDir == "" {
		return 0, errors.New("enroll needs --server, --token, a node name and --state-dir")
	}
	caPEM, err := trustedCA(ctx, o)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return 0, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return 0, err
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return 0, err
	}
	req := nodusv1.NodeEnrollment{CertificateRequest: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}))}
	cfg := &rest.Config{Host: o.Server, BearerToken: o.Token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}
	body, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return 0, err
	}
	httpReq, err := http.NewRequestWithContext(ctx, "POST", strings.TrimSuffix(o.Server, "/")+"/apis/nodus.dev/v1/nodes/"+o.Node+"/enroll", strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: transport, Timeout: time.Minute}).Do(httpReq)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("enrollment refused (%d): %s", resp.StatusCode, data)
	}
	var answer nodusv1.NodeEnrollment
	if err := json.Unmarshal(data, &answer); err != nil {
		return 0, fmt.Errorf("enrollment answer: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return 0, err
	}
	id, _ := json.Marshal(identity{Server: o.Server, Node: o.Node, AgentGeneration: answer.AgentGeneration})
	for name, content := range map[string][]byte{
		fileKey:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		fileCert:   []byte(answer.Certificate),
		fileCA:     []byte(answer.CA),
		fileConfig: id,
	} {
		if err := pki.WriteFileAtomic(filepath.Join(o.StateDir, name), content, 0o600); err != nil {
			return 0, err
		}
	}
	return answer.AgentGeneration, nil
}

// trustedCA returns the CA to trust: the file, or the server's CA if its
// fingerprint matches the pinned one.
func trustedCA(ctx context.Context, o EnrollOptions) ([]byte, error) {
	if o.CAFile != "" {
		return os.ReadFile(o.CAFile)
	}
	if o.CAHash == "" {
		return nil, errors.New("pin the server: give --ca-file or --ca-hash (printed with the enrollment token)")
	}
	// The CA is public; what makes it trusted is the fingerprint the operator handed over.
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(o.Server, "/")+"/ca.crt", nil)
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
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the server's /ca.crt is not a PEM certificate")
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

// clientConfig is the agent's API client configuration from its state directory.
func clientConfig(stateDir string) (*rest.Config, identity, error) {
	var id identity
	data, err := os.ReadFile(filepath.Join(stateDir, fileConfig))
	if err != nil {
		return nil, id, fmt.Errorf("not enrolled (run nodusd enroll): %w", err)
	}
	if err := json.Unmarshal(data, &id); err != nil {
		return nil, id, err
	}
	return &rest.Config{
		Host: id.Server,
		TLSClientConfig: rest.TLSClientConfig{
			CertFile: filepath.Join(stateDir, fileCert), KeyFile: filepath.Join(stateDir, fileKey), CAFile: filepath.Join(stateDir, fileCA),
		},
		QPS: 50, Burst: 100,
	}, id, nil
}
