package server

import (
	"errors"
	"strconv"
	"strings"
)

// ErrEmbeddedJoin: a server on embedded etcd is a cluster of one.
var ErrEmbeddedJoin = errors.New("this server keeps its data in embedded etcd, which serves it alone: replicas share an external etcd cluster (docs/ha.md)")

// JoinCommand is the command line that starts another replica of this
// server's cluster: the same etcd, etcd credentials, cluster key and port.
// Each replica still needs its own address in --tls-san when clients reach
// it by a name of its own.
func (o *Options) JoinCommand() (string, error) {
	if o.embeddedEtcd() {
		return "", ErrEmbeddedJoin
	}
	args := []string{"nodus-server", "--etcd-servers=" + strings.Join(o.EtcdServers, ",")}
	for _, f := range []struct{ flag, value string }{
		{"--etcd-cafile", o.EtcdCAFile}, {"--etcd-certfile", o.EtcdCertFile}, {"--etcd-keyfile", o.EtcdKeyFile},
		{"--cluster-key-file", o.ClusterKeyFile}, {"--bind-address", o.BindAddress},
	} {
		if f.value != "" {
			args = append(args, f.flag+"="+f.value)
		}
	}
	args = append(args, "--secure-port="+strconv.Itoa(o.SecurePort))
	if len(o.TLSSANs) > 0 {
		args = append(args, "--tls-san="+strings.Join(o.TLSSANs, ","))
	}
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " "), nil
}

// shellQuote quotes s for a POSIX shell where it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:@+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
