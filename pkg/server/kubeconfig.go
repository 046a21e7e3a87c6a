package server

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodus-dev/nodus/pkg/atomicfile"
	"github.com/nodus-dev/nodus/pkg/pki"
)

// writeKubeconfig writes a kubeconfig for serverURL that trusts caPEM and
// authenticates with the client certificate pair.
func writeKubeconfig(path, serverURL string, caPEM []byte, client pki.Pair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nodus"] = &clientcmdapi.Cluster{Server: serverURL, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["nodus-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: client.CertPEM, ClientKeyData: client.KeyPEM}
	cfg.Contexts["nodus-admin@nodus"] = &clientcmdapi.Context{Cluster: "nodus", AuthInfo: "nodus-admin"}
	cfg.CurrentContext = "nodus-admin@nodus"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}
