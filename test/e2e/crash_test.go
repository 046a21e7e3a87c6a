package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// answer is what one keyed release-capacity request got.
type answer struct {
	code     int
	replayed bool
	body     string
	err      error
}

// TestKeyedReleasesSurviveAKill9 kills nodus-server (-9, embedded etcd
// with it) while 40 keyed release-capacity requests run, restarts it and
// retries every request with its Idempotency-Key: each host is released
// exactly once, a request answered before the crash gets its answer
// again (replayed), and one the crash cut gets the answer of its release
// at once — never IdempotencyKeyInFlight, never AlreadyReleased.
func TestKeyedReleasesSurviveAKill9(t *testing.T) {
	const hosts = 40
	dir := t.TempDir()
	s := startServer(t, dir)
	ctx := context.Background()
	c := s.Client.NodusV1()
	if _, err := c.Projects().Create(ctx, &nodusv1.Project{ObjectMeta: metav1.ObjectMeta{Name: "acme"},
		Spec: nodusv1.ProjectSpec{Members: []nodusv1.ProjectMember{{Name: "alice", Role: nodusv1.ProjectRoleAdmin}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: "fra1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := c.AccessTokens().Create(ctx, &nodusv1.AccessToken{ObjectMeta: metav1.ObjectMeta{Name: "alice"}, Spec: nodusv1.AccessTokenSpec{User: "alice"}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start, end := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	err = testfleet.Parallel(hosts, 8, func(i int) error {
		name := fmt.Sprintf("crash-%02d", i)
		if _, err := testfleet.Node(ctx, s.Client, name, "fra1", "gpu-crash", "ubuntu"); err != nil {
			return err
		}
		return testfleet.Reserve(ctx, s.Client, name, "acme", nodusv1.ReservationPlacement{Node: name}, start, end)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := testfleet.Count(ctx, time.Minute, hosts, testfleet.ActiveReservations, s.Client); err != nil {
		t.Fatalf("active reservations: %v", err)
	}

	release := func(url string, i int) answer {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.Config.TLSClientConfig.CAData)
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/apis/nodus.dev/v1/namespaces/acme/reservedhosts/crash-%02d/release-capacity", url, i),
			bytes.NewReader([]byte(`{"epoch":1,"agreed":true}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok.Status.Token)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("crash-key-%02d", i))
		resp, err := client.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return answer{code: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(body)}
	}

	// Eight at a time; the server dies once ten have their answer.
	first := make([]answer, hosts)
	var answered atomic.Int32
	tenAnswered := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				first[i] = release(s.Config.Host, i)
				if first[i].code == http.StatusOK && answered.Add(1) == 10 {
					close(tenAnswered)
				}
			}
		}()
	}
	sent := make(chan struct{})
	go func() {
		select {
		case <-tenAnswered:
			once.Do(func() { _ = s.Cmd.Process.Kill() })
		case <-sent:
		}
	}()
	for i := range hosts {
		next <- i
	}
	close(next)
	wg.Wait()
	close(sent)
	once.Do(func() { _ = s.Cmd.Process.Kill() })
	<-s.Exited
	before := map[string]int{}
	for _, a := range first {
		switch {
		case a.err != nil:
			before["no answer"]++
		case a.code == http.StatusOK:
			before["200"]++
		default:
			before[fmt.Sprint(a.code)]++
		}
	}
	t.Logf("before the kill -9: %v", before)

	restarted := time.Now()
	s2 := startServer(t, dir)
	t.Logf("restart → ready: %s", time.Since(restarted).Round(time.Millisecond))
	retried := time.Now()
	var slowest time.Duration
	recognised, ranAgain := 0, 0
	for i := range hosts {
		began := time.Now()
		a := release(s2.Config.Host, i)
		if d := time.Since(began); d > slowest {
			slowest = d
		}
		switch {
		case a.err != nil || a.code != http.StatusOK:
			// 409 IdempotencyKeyInFlight would say the key is still held
			// by the killed process; AlreadyReleased, that the retry did
			// not recognise its own release.
			r, _ := s2.Client.NodusV1().Reservations().Get(ctx, fmt.Sprintf("crash-%02d", i), metav1.GetOptions{})
			t.Errorf("crash-%02d retried after the restart: %d %v %s\nits reservation: %+v", i, a.code, a.err, a.body, r.Status)
		case first[i].code == http.StatusOK && !a.replayed:
			t.Errorf("crash-%02d was answered before the kill; its retry must be the replayed answer", i)
		case first[i].code != http.StatusOK && a.replayed:
			recognised++ // released before the kill, its answer lost
		case first[i].code != http.StatusOK:
			ranAgain++
		}
	}
	t.Logf("40 retries after the restart took %s, the slowest %s; of the %d without an answer, %d were released before the kill (recognised, replayed) and %d ran again",
		time.Since(retried).Round(time.Millisecond), slowest.Round(time.Millisecond), hosts-before["200"], recognised, ranAgain)

	list, err := s2.Client.NodusV1().Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		if r.Status.Epoch != 2 || (r.Status.State != nodusv1.ReservationStateReleasing && r.Status.State != nodusv1.ReservationStateReleased) {
			t.Errorf("%s must be released exactly once (epoch 2): epoch %d, %s", r.Name, r.Status.Epoch, r.Status.State)
		}
	}
}
