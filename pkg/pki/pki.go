// Package pki creates and loads the server's certificate authority, its
// serving certificate and client certificates signed by that CA. Everything
// is ECDSA P-256 and PEM on disk; keys are written 0600.
package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nodus-dev/nodus/pkg/atomicfile"
)

const (
	caValidity     = 10 * 365 * 24 * time.Hour
	leafValidity   = 365 * 24 * time.Hour
	clockSkewSlack = 5 * time.Minute
	// renewBefore is how close to its end a certificate is issued anew
	// when it is loaded: at a start, or by a running server's daily
	// check. One loaded as it was for as long as the file lasted expired
	// after a year, and the server that loaded it could no longer reach
	// its own etcd.
	renewBefore = 30 * 24 * time.Hour
)

// CA is a loaded certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// Pair is a certificate and key in PEM.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// LoadOrCreateCA reads DIR/ca.crt and DIR/ca.key, creating them on first use.
func LoadOrCreateCA(dir, commonName string) (*CA, error) {
	ca, err := LoadCA(dir)
	if !errors.Is(err, os.ErrNotExist) {
		return ca, err
	}
	if ca, err = NewCA(commonName); err != nil {
		return nil, err
	}
	return ca, ca.WriteFiles(dir)
}

// LoadCA reads DIR/ca.crt and DIR/ca.key; os.ErrNotExist when either is missing.
func LoadCA(dir string) (*CA, error) {
	certPEM, keyPEM, err := readPair(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	return ParseCA(certPEM, keyPEM)
}

// NewCA makes a new self-signed certificate authority.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkewSlack),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	pair, err := encode(der, key)
	if err != nil {
		return nil, err
	}
	return ParseCA(pair.CertPEM, pair.KeyPEM)
}

// KeyPEM is the CA's private key in PEM.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// WriteFiles writes DIR/ca.crt and DIR/ca.key (0600).
func (ca *CA) WriteFiles(dir string) error {
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	return writePair(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), Pair{CertPEM: ca.CertPEM, KeyPEM: keyPEM})
}

// LoadOrCreateServing reads DIR/NAME.crt and NAME.key, or issues a serving
// certificate for hosts (DNS names or IPs) when they are missing or no longer
// cover hosts.
func (ca *CA) LoadOrCreateServing(dir, name string, hosts []string) (certPath, keyPath string, err error) {
	return ca.loadOrCreateHost(dir, name, hosts, x509.ExtKeyUsageServerAuth)
}

// LoadOrCreatePeer is LoadOrCreateServing for a certificate that also
// authenticates as a client: what an etcd member presents to its peers.
func (ca *CA) LoadOrCreatePeer(dir, name string, hosts []string) (certPath, keyPath string, err error) {
	return ca.loadOrCreateHost(dir, name, hosts, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) loadOrCreateHost(dir, name string, hosts []string, usages ...x509.ExtKeyUsage) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if certPEM, _, err := readPair(certPath, keyPath); err == nil && ca.signed(certPEM) && covers(certPEM, hosts) {
		return certPath, keyPath, nil
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: usages,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	pair, err := ca.issue(tmpl)
	if err != nil {
		return "", "", err
	}
	return certPath, keyPath, writePair(certPath, keyPath, pair)
}

// IssueClient issues a client certificate for user in groups (the
// Kubernetes convention: CN is the user, O are the groups).
func (ca *CA) IssueClient(user string, groups []string) (Pair, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// LoadOrCreateClient reads DIR/NAME.crt and NAME.key, or issues them
// when they are missing, of another CA, or near their end.
func (ca *CA) LoadOrCreateClient(dir, name, user string, groups []string) (Pair, error) {
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if certPEM, keyPEM, err := readPair(certPath, keyPath); err == nil && ca.signed(certPEM) && lasting(certPEM) {
		return Pair{certPEM, keyPEM}, nil
	}
	pair, err := ca.IssueClient(user, groups)
	if err != nil {
		return Pair{}, err
	}
	return pair, writePair(certPath, keyPath, pair)
}

func (ca *CA) issue(tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-clockSkewSlack)
	tmpl.NotAfter = now.Add(leafValidity)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Pair{}, err
	}
	return encode(der, key)
}

// signed says whether certPEM was issued by ca: a replica that joined a
// cluster replaces what its own earlier CA issued.
func (ca *CA) signed(certPEM []byte) bool {
	cert, err := parseCertificate(certPEM)
	return err == nil && cert.CheckSignatureFrom(ca.Cert) == nil
}

// parseCertificate is the first certificate of certPEM.
func parseCertificate(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// lasting says whether certPEM is a certificate further than renewBefore
// from its end.
func lasting(certPEM []byte) bool {
	cert, err := parseCertificate(certPEM)
	return err == nil && time.Now().Before(cert.NotAfter.Add(-renewBefore))
}

// covers says whether certPEM is lasting and names every one of hosts.
func covers(certPEM []byte, hosts []string) bool {
	cert, err := parseCertificate(certPEM)
	if err != nil || !lasting(certPEM) {
		return false
	}
	for _, h := range hosts {
		// A wildcard is no host name to verify: the certificate names it.
		if strings.HasPrefix(h, "*.") && slices.Contains(cert.DNSNames, h) {
			continue
		}
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// ParseCA reads a CA certificate and its key from PEM.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("CA certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CA key: %w", err)
	}
	// A pair that does not belong together (a write stopped between the
	// two files, a file copied from elsewhere) would sign certificates
	// that its certificate does not verify.
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("the CA certificate (%s) is not a CA's, or not of the CA key beside it", cert.Subject.CommonName)
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (Pair, error) {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func readPair(certPath, keyPath string) ([]byte, []byte, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

func writePair(certPath, keyPath string, p Pair) error {
	if err := os.MkdirAll(filepath.Dir(certPath), 0o700); err != nil {
		return err
	}
	if err := atomicfile.Write(keyPath, p.KeyPEM, 0o600); err != nil {
		return err
	}
	return atomicfile.Write(certPath, p.CertPEM, 0o644)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on Linux; a fixed serial would still be a valid certificate.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// ParseCSR reads a PEM certificate request and checks its signature.
func ParseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("the certificate request is not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse the certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the certificate request's signature is invalid: %w", err)
	}
	if err := strongEnough(csr.PublicKey); err != nil {
		return nil, fmt.Errorf("the certificate request's key: %w", err)
	}
	return csr, nil
}

// minRSABits is the smallest RSA key the CA certifies: the strength of
// its own P-256 key is about that of 3,072 bits, and 2,048 is what
// Kubernetes' and most CAs' policies still accept.
const minRSABits = 2048

// strongEnough refuses a key that would be the weakest link of the
// credential it is certified into: RSA under minRSABits, an elliptic curve
// under P-256, or a kind the CA does not issue for.
func strongEnough(key any) error {
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		if k.Curve.Params().BitSize < 256 {
			return fmt.Errorf("an ECDSA key on %s is too weak; use P-256 or larger (nodusd makes P-256 keys)", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("a %d-bit RSA key is too weak; use %d bits or more, or a P-256 key (nodusd makes P-256 keys)", k.N.BitLen(), minRSABits)
		}
	default:
		return fmt.Errorf("a %T key is not certified; use ECDSA P-256 (what nodusd makes), Ed25519 or RSA of %d bits or more", key, minRSABits)
	}
	return nil
}

// SignCSR issues a client certificate valid for validity for the key of a
// certificate request, with the subject the CA decides (never the
// requester's). It is backdated by a tenth of its validity, at most five
// minutes, for clocks a little behind: a short-lived certificate's renewal
// time, two thirds into its validity, stays well before its end.
func (ca *CA) SignCSR(csr *x509.CertificateRequest, subject pkix.Name, validity time.Duration) ([]byte, error) {
	now := time.Now()
	slack := min(clockSkewSlack, validity/10)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    now.Add(-slack),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// Fingerprint is the SHA-256 fingerprint of the CA certificate, as
// "sha256:<hex>", for agents to pin.
func (ca *CA) Fingerprint() string {
	sum := sha256.Sum256(ca.Cert.Raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// KeyFingerprint is the SHA-256 fingerprint of the public key a
// certificate request is for (of its DER SubjectPublicKeyInfo), as
// "sha256:<hex>": what an enrollment token records of the agent key it
// enrolled.
func KeyFingerprint(csr *x509.CertificateRequest) string {
	sum := sha256.Sum256(csr.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}
