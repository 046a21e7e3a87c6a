package server

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

func TestFeatureGatesFlagNamesOnlyTheLibrarysGates(t *testing.T) {
	o := NewOptions(io.Discard)
	fs := pflag.NewFlagSet("nodus-server", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--feature-gates=ListFromCacheSnapshot=true,NoSuchGate=false"}); err != nil {
		t.Fatal(err)
	}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "NoSuchGate is not a feature gate") {
		t.Fatalf("Validate: %v, want NoSuchGate refused", err)
	}
	if strings.Contains(err.Error(), "ListFromCacheSnapshot") {
		t.Fatalf("Validate refused a gate the library has: %v", err)
	}
}

func TestListFromCacheSnapshotIsOffUnlessTheOperatorTurnsItOn(t *testing.T) {
	t.Cleanup(func() { _, _ = apiLibraryVersion(nil) }) // the gates are the process's
	for _, c := range []struct {
		gates map[string]bool
		want  bool
	}{
		{nil, false},
		{map[string]bool{string(features.ListFromCacheSnapshot): true}, true},
		{map[string]bool{string(features.ListFromCacheSnapshot): false}, false},
	} {
		if _, err := apiLibraryVersion(c.gates); err != nil {
			t.Fatal(err)
		}
		if got := utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot); got != c.want {
			t.Errorf("with --feature-gates %v: ListFromCacheSnapshot %v, want %v", c.gates, got, c.want)
		}
	}
}

func TestTheEmbeddedEtcdQuotaHasAFloor(t *testing.T) {
	for _, c := range []struct {
		flag string
		ok   bool
	}{
		{"--embedded-etcd-quota-bytes=33554432", true},
		{"--embedded-etcd-quota-bytes=33554431", false},
		{"--embedded-etcd-quota-bytes=0", false},
	} {
		o := NewOptions(io.Discard)
		fs := pflag.NewFlagSet("nodus-server", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse([]string{c.flag}); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate says %v", c.flag, err)
		}
	}
	if o := NewOptions(io.Discard); o.EmbeddedEtcdQuotaBytes != 8<<30 {
		t.Errorf("the default quota is %d bytes, want 8 GiB", o.EmbeddedEtcdQuotaBytes)
	}
}
