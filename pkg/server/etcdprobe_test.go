package server

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/nodus-dev/nodus/pkg/embeddedetcd"
)

// TestProbeSpeaksGRPC: the start-up probe reaches a member whose client
// port serves gRPC alone, and says what to do when it cannot: a missing
// client certificate, an http:// member asked over https://, nothing
// listening.
func TestProbeSpeaksGRPC(t *testing.T) {
	secure, err := embeddedetcd.Start(t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer secure.Stop(context.Background())
	plain, err := embeddedetcd.StartInsecure(t.TempDir(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop(context.Background())
	credential, err := secure.TLS.Config()
	if err != nil {
		t.Fatal(err)
	}
	noCertificate := credential.Clone()
	noCertificate.Certificates, noCertificate.GetClientCertificate = nil, nil

	ctx := context.Background()
	if err := probe(ctx, []string{secure.ClientURL}, credential, 5*time.Second); err != nil {
		t.Errorf("the member with the server's credential: %v", err)
	}
	if err := probe(ctx, []string{plain.ClientURL}, nil, 5*time.Second); err != nil {
		t.Errorf("the plain member: %v", err)
	}
	refused := []struct {
		name, server string
		tls          *tls.Config
		want         string
	}{
		{"no client certificate", secure.ClientURL, noCertificate, "give --etcd-certfile and --etcd-keyfile"},
		{"https to a plain member", strings.Replace(plain.ClientURL, "http://", "https://", 1), credential, "this etcd serves http://"},
		{"nothing listening", "https://127.0.0.1:1", credential, "etcd did not answer within 1s"},
	}
	for _, c := range refused {
		err := probe(ctx, []string{c.server}, c.tls, time.Second)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error that says %q", c.name, err, c.want)
		}
	}
}
