package server

import (
	"errors"
	"net"
	"strconv"
	"strings"
)

// ErrEmbeddedJoin: a server on embedded etcd is a cluster of one.
var ErrEmbeddedJoin = errors.New("this server keeps its data in embedded etcd, which serves it alone: replicas share an external etcd cluster (docs/ha.md)")

// JoinCommand is the command line that starts another replica of this
// server's cluster: the same etcd, etcd credentials, cluster key and port,
// and the bind address when it is a wildcard. Each replica still needs its
// own address in --tls-san when clients reach it by a name of its own, and
// its own --bind-address when it binds one.
func (o *Options) JoinCommand() (string, error) {
	if o.embeddedEtcd() {
		return "", ErrEmbeddedJoin
	}
	args := []string{"nodus-server", "--etcd-servers=" + strings.Join(o.EtcdServers, ",")}
	// An address of this machine's own would not bind on another: only a
	// wildcard is the cluster's.
	bind := ""
	if ip := net.ParseIP(o.BindAddress); ip != nil && ip.IsUnspecified() {
		bind = o.BindAddress
	}
	for _, f := range []struct{ flag, value string }{
		{"--etcd-cafile", o.EtcdCAFile}, {"--etcd-certfile", o.EtcdCertFile}, {"--etcd-keyfile", o.EtcdKeyFile},
		{"--cluster-key-file", o.ClusterKeyFile}, {"--bind-address", bind},
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
