package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/envelope"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

var (
	termStart = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	termEnd   = metav1.NewTime(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// tokenFor creates an AccessToken for user and returns a client config that uses it.
func tokenFor(t *testing.T, s *testserver.Server, user string, groups ...string) *rest.Config {
	t.Helper()
	tok, err := s.Client.NodusV1().AccessTokens().Create(ctx(t), &nodusv1.AccessToken{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"},
		Spec:       nodusv1.AccessTokenSpec{User: user, Groups: groups},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create token for %s: %v", user, err)
	}
	if tok.Status.Token == "" {
		t.Fatalf("create response carries no token: %+v", tok.Status)
	}
	return bearer(s, tok.Status.Token)
}

func bearer(s *testserver.Server, token string) *rest.Config {
	return &rest.Config{
		Host:            s.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.TLSClientConfig.CAData},
		BearerToken:     token,
		QPS:             1000, Burst: 2000,
	}
}

func anonymous(s *testserver.Server) *rest.Config {
	return &rest.Config{Host: s.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: s.Config.TLSClientConfig.CAData}}
}

// response is a raw HTTP answer.
type response struct {
	code   int
	header http.Header
	body   []byte
}

// do sends a raw request with the credentials of cfg.
func do(t *testing.T, cfg *rest.Config, method, path, contentType string, body io.Reader, header ...string) response {
	t.Helper()
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx(t), method, cfg.Host+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Transport: transport, Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: data}
}

// envelopeOf decodes and checks an error body: a Status with a registered
// reason, docs, fix and the request id of the response header.
func envelopeOf(t *testing.T, r response) envelope.Status {
	t.Helper()
	var s envelope.Status
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatalf("error body is not JSON: %v\n%s", err, r.body)
	}
	problems := []string{}
	if s.Kind != "Status" || s.APIVersion != "v1" {
		problems = append(problems, fmt.Sprintf("kind/apiVersion %q/%q", s.Kind, s.APIVersion))
	}
	if int(s.Code) != r.code {
		problems = append(problems, fmt.Sprintf("code %d in body, %d on the wire", s.Code, r.code))
	}
	if s.Reason == "" || s.Message == "" || s.Fix == "" {
		problems = append(problems, "empty reason, message or fix")
	}
	if strings.HasPrefix(strings.TrimSpace(s.Message), "{") {
		problems = append(problems, "a JSON document nested in the message")
	}
	if !strings.HasSuffix(s.Docs, "/docs/errors/"+string(s.Reason)) {
		problems = append(problems, "docs URL "+s.Docs)
	}
	if id := r.header.Get(envelope.HeaderRequestID); id == "" || id != s.RequestID {
		problems = append(problems, fmt.Sprintf("requestId %q, header %q", s.RequestID, id))
	}
	if len(problems) > 0 {
		t.Fatalf("bad envelope (%s):\n%s", strings.Join(problems, "; "), r.body)
	}
	return s
}

func project(name string, members ...nodusv1.ProjectMember) *nodusv1.Project {
	return &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nodusv1.ProjectSpec{Members: members}}
}

func reservedHost(ns, name string) *nodusv1.ReservedHost {
	return &nodusv1.ReservedHost{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Status: nodusv1.ReservedHostStatus{
			Inventory: nodusv1.NodeInventory{CPU: 128, MemoryMiB: 2 << 20, DiskGiB: 3500,
				GPUs: []nodusv1.NodeGPU{{Type: "h100-sxm-80g", MemoryMiB: 81559, Driver: "550.54.15"}}},
			Pool: "fra1",
			Reservation: nodusv1.HostReservation{Project: ns, StartsAt: termStart, EndsAt: termEnd,
				LoginUser: "ubuntu", Epoch: 1, State: nodusv1.ReservationStateActive},
		},
	}
}

// sleepAs runs a sleep as account (the test is root) until the test ends;
// the channel is closed once it has ended, by whatever ended it.
func sleepAs(t *testing.T, account string) <-chan struct{} {
	t.Helper()
	u, err := user.Lookup(account)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	sleep := exec.Command("sleep", "600")
	sleep.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { _ = sleep.Wait(); close(ended) }()
	t.Cleanup(func() { _ = sleep.Process.Kill(); <-ended })
	return ended
}

// deleteGoneNode deletes node name as an operator does a machine that is
// gone for good (or re-imaged before it comes back): with the annotation
// that lets a node owing a cleaning go.
func deleteGoneNode(t *testing.T, s *testserver.Server, name string) {
	t.Helper()
	nodes := s.Client.NodusV1().Nodes()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx(t), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[nodusv1.AnnotationDeleteUncleaned] = "true"
		_, err = nodes.Update(ctx(t), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := nodes.Delete(ctx(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
