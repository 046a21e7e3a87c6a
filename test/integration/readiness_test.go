package integration

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/testserver"
)

// TestReadyMeansEveryWatchCacheServes restarts a server on stored data and,
// the moment /readyz first answers 200, watches every resource: a watch
// cache still filling answers 429, which an agent or an informer would get
// from a replica that called itself ready. At this test's size the caches
// mostly fill before the first poll even without the readiness hook, so the
// test also requires the hook among /readyz's checks.
func TestReadyMeansEveryWatchCacheServes(t *testing.T) {
	testserver.KeepLogs(t)
	dir := t.TempDir()
	s, err := testserver.Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctx(t)
	for i := range 300 {
		if _, err := s.Client.NodusV1().Pools().Create(ctx, &nodusv1.Pool{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-%d", i)}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.Stop()

	s, err = testserver.Start(dir, nil) // returns at the first 200 of /readyz
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	resources, err := s.Client.Discovery().ServerResourcesForGroupVersion(nodusv1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	watched := 0
	for _, r := range resources.APIResources {
		if strings.Contains(r.Name, "/") || !sets.New(r.Verbs...).Has("watch") {
			continue
		}
		watched++
		stream, err := s.Client.Discovery().RESTClient().Get().AbsPath("/apis", nodusv1.SchemeGroupVersion.String(), r.Name).
			Param("watch", "true").Stream(ctx)
		if err != nil {
			t.Errorf("WATCH %s right after ready: %v", r.Name, err)
			continue
		}
		stream.Close()
	}
	if watched < 10 {
		t.Fatalf("only %d watchable resources in discovery: %v", watched, resources.APIResources)
	}
	ready := do(t, s.Config, "GET", "/readyz?verbose", "", nil)
	if !strings.Contains(string(ready.body), "[+]poststarthook/storage-readiness ok") {
		t.Errorf("/readyz does not wait for the watch caches:\n%s", ready.body)
	}
}
