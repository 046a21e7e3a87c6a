package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/version"
	baseversion "k8s.io/component-base/version"

	"github.com/nodus-dev/nodus/pkg/testfleet"
)

// TestStampedServerEmulatesItsAPILibrary runs the server binary stamped with
// Nodus' version, as `make build` stamps it. The apiserver library used to
// read that stamp (v0.1.0) as the Kubernetes version to emulate, which
// turned off in shipped binaries every feature that `go test` builds ran
// with: a watch list was refused with 422.
func TestStampedServerEmulatesItsAPILibrary(t *testing.T) {
	s := startServer(t, t.TempDir())
	out, errOut, err := s.kubectl("get", "--raw", "/version")
	if err != nil {
		t.Fatalf("/version: %v %s", err, errOut)
	}
	var info version.Info
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("/version: %v\n%s", err, out)
	}
	if info.GitVersion != buildVersion {
		t.Errorf("gitVersion %q, want the build stamp %q", info.GitVersion, buildVersion)
	}
	if emulated := info.EmulationMajor + "." + info.EmulationMinor; emulated != baseversion.DefaultKubeBinaryVersion {
		t.Errorf("the server emulates Kubernetes %s, want the apiserver library's %s:\n%s", emulated, baseversion.DefaultKubeBinaryVersion, out)
	}
	// A watch list (what client-go's informers ask first) streams the
	// initial state and ends it with a bookmark.
	out, errOut, err = s.kubectl("get", "--raw",
		"/apis/nodus.dev/v1/pools?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=5")
	if err != nil || !strings.Contains(out, `"k8s.io/initial-events-end":"true"`) {
		t.Errorf("watch list: %v %s\n%s", err, errOut, out)
	}
}

// The stamped binary takes the library's feature gates by name (the one its
// help names among them) and refuses a name the library does not have. It
// refused every gate once: it checked the names before it set the
// Kubernetes version it emulates, and at the stamp's "0.1" no gate exists.
func TestStampedServerTakesTheLibrarysFeatureGates(t *testing.T) {
	s := startServerWith(t, filepath.Join(t.TempDir(), "data"), "--feature-gates", "ListFromCacheSnapshot=true,WatchListCompression=false")
	if _, errOut, err := s.kubectl("get", "--raw", "/readyz"); err != nil {
		t.Fatalf("/readyz: %v %s", err, errOut)
	}
	out := &syncBuffer{}
	if _, err := testfleet.StartServer(serverBinary, filepath.Join(t.TempDir(), "refused"), out, "--feature-gates", "NoSuchGate=true"); err == nil ||
		!strings.Contains(out.String(), "NoSuchGate is not a feature gate") {
		t.Fatalf("an unknown gate: %v, want it refused by name\n%s", err, out.String())
	}
}
