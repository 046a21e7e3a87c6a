package main

import (
	"os"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodus-dev/nodus/pkg/agent"
)

// The configuration file shipped in deploy/ must be one nodusd accepts.
func TestShippedConfigParses(t *testing.T) {
	data, err := os.ReadFile("../../deploy/nodusd-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var o agent.Options
	if err := yaml.UnmarshalStrict(data, &fileConfig{&o}); err != nil {
		t.Fatalf("deploy/nodusd-config.yaml: %v", err)
	}
	if o.StateDir != "/var/lib/nodusd" || o.Grace != 5*time.Second || o.BorrowerUser != "nodus-borrower" ||
		o.BorrowerSlots != 8 || o.ExecutionsDir != "/var/lib/nodus-executions" {
		t.Errorf("parsed %+v", o)
	}
	if err := yaml.UnmarshalStrict([]byte("borrowerSlots: -1\n"), &fileConfig{&o}); err == nil {
		t.Error("negative borrowerSlots accepted")
	}
	if err := yaml.UnmarshalStrict([]byte("borrowerSlot: 2\n"), &fileConfig{&o}); err == nil {
		t.Error("a misspelt key accepted")
	}
}
