package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodus-dev/nodus/pkg/generated/clientset/versioned"
	"github.com/nodus-dev/nodus/pkg/revocation"
	"github.com/nodus-dev/nodus/pkg/testfleet"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestACallersOpenWatchesAreBounded: a watch is a long-running request no
// in-flight limit counts, holding a watcher of the watch cache: one
// tenant's token could open them until the server ran out of memory. A
// caller other than an operator or an agent keeps MaxWatchesPerCaller
// open; the next is answered 429 (without Retry-After: waiting ends no
// watch, and client-go would wait and ask again, silent), other callers
// are not held back, and ending one lets the next in.
func TestACallersOpenWatchesAreBounded(t *testing.T) {
	s := testserver.StartTestServer(t)
	f := newFleet(t, s)
	hosts := versioned.NewForConfigOrDie(f.member).NodusV1().ReservedHosts("acme")
	var open []watch.Interface
	defer func() {
		for _, w := range open {
			w.Stop()
		}
	}()
	for i := range revocation.MaxWatchesPerCaller {
		w, err := hosts.Watch(ctx(t), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("watch %d: %v", i+1, err)
		}
		open = append(open, w)
	}
	if _, err := hosts.Watch(ctx(t), metav1.ListOptions{}); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "watches open") {
		t.Fatalf("watch %d: %v", revocation.MaxWatchesPerCaller+1, err)
	}
	path := "/apis/nodus.dev/v1/namespaces/acme/reservedhosts?watch=true"
	if r := do(t, f.member, "GET", path, "", nil); r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") != "" ||
		!strings.Contains(string(r.body), "End one of your open watches") {
		t.Fatalf("watch %d, its answer: %d %q %.300s", revocation.MaxWatchesPerCaller+1, r.code, r.header.Get("Retry-After"), r.body)
	}
	other, err := versioned.NewForConfigOrDie(f.admin).NodusV1().ReservedHosts("acme").Watch(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("another member's watch was held back: %v", err)
	}
	other.Stop()
	operator, err := s.Client.NodusV1().ReservedHosts("acme").Watch(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("an operator's watch: %v", err)
	}
	operator.Stop()

	open[0].Stop()
	open = open[1:]
	// A watch the server ends after a second, as its probe.
	if err := testfleet.Eventually(ctx(t), 10*time.Second, func(context.Context) (bool, error) {
		return do(t, f.member, "GET", path+"&timeoutSeconds=1", "", nil).code == http.StatusOK, nil
	}); err != nil {
		t.Error("a watch ended did not let the next one in")
	}
}
