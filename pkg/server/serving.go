package server

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/nodus-dev/nodus/pkg/auth"
)

// listen binds the API's address, or takes the listener a test gave, and
// says the URL clients use.
func (o *Options) listen() (net.Listener, string, error) {
	listener := o.Listener
	if listener == nil {
		addr := net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort))
		var err error
		if listener, err = net.Listen("tcp", addr); err != nil {
			return nil, "", fmt.Errorf("listen on %s: %w (choose another --secure-port or --bind-address)", addr, err)
		}
	}
	port := listener.Addr().(*net.TCPAddr).Port
	return listener, "https://" + net.JoinHostPort(o.clientHost(), strconv.Itoa(port)), nil
}

// peerAddress is where other replicas reach this one's port, to tell
// whether it still runs: the bind address, or with a wildcard bind the
// host's default interface, as kube-apiserver picks its advertise address.
func (o *Options) peerAddress(listener net.Listener) string {
	addr, ok := listener.Addr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	ip := addr.IP
	if ip == nil || ip.IsUnspecified() {
		var err error
		if ip, err = utilnet.ChooseHostInterface(); err != nil {
			return ""
		}
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(addr.Port))
}

// servingHosts are the names this replica's serving certificate covers.
func (o *Options) servingHosts() []string {
	hosts := append([]string{"localhost", "127.0.0.1", "::1", o.clientHost()}, o.TLSSANs...)
	if h, err := os.Hostname(); err == nil {
		hosts = append(hosts, h)
	}
	return hosts
}

// writeCredentials issues this replica's serving certificate and the
// bootstrap operator's kubeconfig from the cluster CA, unless DIR has
// them from it already, and returns their paths.
func (o *Options) writeCredentials(id *identity, url string) (certFile, keyFile, kubeconfig string, err error) {
	certFile, keyFile, err = id.ca.LoadOrCreateServing(o.pkiDir(), "serving", o.servingHosts())
	if err != nil {
		return "", "", "", fmt.Errorf("serving certificate: %w", err)
	}
	admin, err := id.ca.LoadOrCreateClient(o.pkiDir(), "admin", auth.AdminUser, []string{auth.GroupOperators})
	if err != nil {
		return "", "", "", fmt.Errorf("admin credential: %w", err)
	}
	kubeconfig = filepath.Join(o.DataDir, "admin.kubeconfig")
	if err := writeKubeconfig(kubeconfig, url, id.ca.CertPEM, admin); err != nil {
		return "", "", "", fmt.Errorf("write %s: %w", kubeconfig, err)
	}
	return certFile, keyFile, kubeconfig, nil
}

// renewCredentials issues this replica's serving certificate and the
// bootstrap operator's credential anew where they near their end, and
// writes the kubeconfig again only when its credential changed (an
// operator's edit of it is kept otherwise). It returns the files it wrote.
func (o *Options) renewCredentials(id *identity, url string) ([]string, error) {
	serving, admin := filepath.Join(o.pkiDir(), "serving.crt"), filepath.Join(o.pkiDir(), "admin.crt")
	servingBefore, _ := os.ReadFile(serving)
	adminBefore, _ := os.ReadFile(admin)
	if _, _, err := id.ca.LoadOrCreateServing(o.pkiDir(), "serving", o.servingHosts()); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	pair, err := id.ca.LoadOrCreateClient(o.pkiDir(), "admin", auth.AdminUser, []string{auth.GroupOperators})
	if err != nil {
		return nil, fmt.Errorf("admin credential: %w", err)
	}
	var renewed []string
	if after, _ := os.ReadFile(serving); !bytes.Equal(after, servingBefore) {
		renewed = append(renewed, serving)
	}
	if !bytes.Equal(pair.CertPEM, adminBefore) {
		kubeconfig := filepath.Join(o.DataDir, "admin.kubeconfig")
		if err := writeKubeconfig(kubeconfig, url, id.ca.CertPEM, pair); err != nil {
			return renewed, fmt.Errorf("write %s: %w", kubeconfig, err)
		}
		renewed = append(renewed, admin, kubeconfig)
	}
	return renewed, nil
}

// applyServing makes the generic server serve HTTPS on listener with the
// serving certificate.
func (o *Options) applyServing(generic *genericapiserver.Config, listener net.Listener, certFile, keyFile string) error {
	serving := genericoptions.NewSecureServingOptions().WithLoopback()
	serving.Listener = listener
	serving.BindAddress = net.ParseIP(o.BindAddress)
	serving.BindPort = listener.Addr().(*net.TCPAddr).Port
	serving.ServerCert.CertKey = genericoptions.CertKey{CertFile: certFile, KeyFile: keyFile}
	if err := serving.ApplyTo(&generic.SecureServing, &generic.LoopbackClientConfig); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	// The controllers' and the revocation's clients are in this process:
	// gzip on lists and watch lists (APIResponseCompression,
	// WatchListCompression) would only cost CPU on both ends.
	generic.LoopbackClientConfig.DisableCompression = true
	// They stay on JSON: in protobuf they measured no faster (UPDATE,
	// allocations) and left a restarted server larger (docs/performance.md).
	return nil
}
