package lending

import (
	"testing"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestAnExecutionsShareIsNeverNoLimit: a cap divided among more GPUs or
// executions than it has units still gives each execution a limit; 0
// would reach the sandbox as no limit at all.
func TestAnExecutionsShareIsNeverNoLimit(t *testing.T) {
	cases := []struct {
		name              string
		l                 *nodusv1.ReservationLending
		gpus              int32
		memoryMiB, milliC int64
	}{
		{"by GPUs", &nodusv1.ReservationLending{MaxGPUs: 8, MaxExecutions: 8, MemoryMiB: 8 << 10, MilliCPUs: 8000}, 2, 2 << 10, 2000},
		{"without GPUs, by executions", &nodusv1.ReservationLending{MaxGPUs: 8, MaxExecutions: 4, MemoryMiB: 8 << 10, MilliCPUs: 8000}, 0, 2 << 10, 2000},
		{"a cap smaller than the GPUs lent", &nodusv1.ReservationLending{MaxGPUs: 128, MaxExecutions: 128, MemoryMiB: 64, MilliCPUs: 100}, 1, 1, 1},
		{"a cap smaller than the executions", &nodusv1.ReservationLending{MaxExecutions: 128, MemoryMiB: 64, MilliCPUs: 100}, 0, 1, 1},
		{"no caps", &nodusv1.ReservationLending{MaxGPUs: 8, MaxExecutions: 8}, 1, 0, 0},
		{"no agreement", nil, 1, 0, 0},
	}
	for _, tc := range cases {
		memoryMiB, milliCPUs := ExecutionLimits(tc.l, tc.gpus)
		if memoryMiB != tc.memoryMiB || milliCPUs != tc.milliC {
			t.Errorf("%s: ExecutionLimits = %d MiB, %d thousandths; want %d, %d", tc.name, memoryMiB, milliCPUs, tc.memoryMiB, tc.milliC)
		}
	}
}

// TestAnAgreementWithoutCapsIsCappedAtTheHostsShare: a lend from before
// every lend had to cap memory and CPUs left them 0, no limit to a
// sandbox; the scheduler and the agent cap them at the share a lend would
// give now, each from the inventory it knows, and leave them 0 only where
// that inventory does not know the host's figure.
func TestAnAgreementWithoutCapsIsCappedAtTheHostsShare(t *testing.T) {
	eightGPUs := &nodusv1.NodeInventory{CPU: 64, MemoryMiB: 512 << 10, GPUs: make([]nodusv1.NodeGPU, 8)}
	cases := []struct {
		name              string
		l                 *nodusv1.ReservationLending
		inv               *nodusv1.NodeInventory
		memoryMiB, milliC int64
	}{
		{"no caps, 2 of 8 GPUs lent", &nodusv1.ReservationLending{Lent: true, MaxGPUs: 2, MaxExecutions: 2}, eightGPUs, 128 << 10, 16000},
		{"a memory cap kept, CPUs capped", &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MaxExecutions: 8, MemoryMiB: 1024}, eightGPUs, 1024, 64000},
		{"more GPUs lent than the host reports now", &nodusv1.ReservationLending{Lent: true, MaxGPUs: 16, MaxExecutions: 8}, eightGPUs, 512 << 10, 64000},
		{"a host without GPUs", &nodusv1.ReservationLending{Lent: true, MaxExecutions: 4}, &nodusv1.NodeInventory{CPU: 4, MemoryMiB: 8192}, 8192, 4000},
		{"an inventory not known", &nodusv1.ReservationLending{Lent: true, MaxGPUs: 2, MaxExecutions: 2}, nil, 0, 0},
		{"an inventory without memory", &nodusv1.ReservationLending{Lent: true, MaxGPUs: 2, MaxExecutions: 2}, &nodusv1.NodeInventory{CPU: 8}, 0, 8000},
	}
	for _, tc := range cases {
		before := *tc.l
		got := WithHostShare(tc.l, tc.inv)
		if got.MemoryMiB != tc.memoryMiB || got.MilliCPUs != tc.milliC {
			t.Errorf("%s: capped at %d MiB, %d thousandths; want %d, %d", tc.name, got.MemoryMiB, got.MilliCPUs, tc.memoryMiB, tc.milliC)
		}
		if *tc.l != before {
			t.Errorf("%s: the agreement itself changed: %+v", tc.name, *tc.l)
		}
	}
	if WithHostShare(nil, eightGPUs) != nil {
		t.Error("no agreement got caps")
	}
}

// TestAnAgreementIsHeldToTheHostsShare: a reservation moved to a smaller
// machine keeps the agreement made on the first; the scheduler places on
// it no more than this one has.
func TestAnAgreementIsHeldToTheHostsShare(t *testing.T) {
	eightGPUs := &nodusv1.NodeInventory{CPU: 64, MemoryMiB: 512 << 10, GPUs: make([]nodusv1.NodeGPU, 8)}
	for _, tc := range []struct {
		name              string
		l                 *nodusv1.ReservationLending
		inv               *nodusv1.NodeInventory
		memoryMiB, milliC int64
	}{
		{"caps past what the host has", &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MemoryMiB: 2 << 20, MilliCPUs: 224000}, eightGPUs, 512 << 10, 64000},
		{"caps within what the host has", &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MemoryMiB: 1 << 10, MilliCPUs: 2000}, eightGPUs, 1 << 10, 2000},
		{"an inventory without figures", &nodusv1.ReservationLending{Lent: true, MaxGPUs: 8, MemoryMiB: 2 << 20, MilliCPUs: 224000}, &nodusv1.NodeInventory{}, 2 << 20, 224000},
	} {
		before := *tc.l
		got := HeldToHost(tc.l, tc.inv)
		if got.MemoryMiB != tc.memoryMiB || got.MilliCPUs != tc.milliC {
			t.Errorf("%s: held at %d MiB, %d thousandths; want %d, %d", tc.name, got.MemoryMiB, got.MilliCPUs, tc.memoryMiB, tc.milliC)
		}
		if *tc.l != before {
			t.Errorf("%s: the agreement itself changed: %+v", tc.name, *tc.l)
		}
	}
}

// TestWhyDrainedReadsWhatDrainAskedWrote: the host's agent reports a
// running execution's drain with the reason the server gave; a message the
// server did not write as a drain's reads as a withdrawal, the only drain
// a server before session 61 asked for.
func TestWhyDrainedReadsWhatDrainAskedWrote(t *testing.T) {
	if why := WhyDrained(DrainAsked("pool gpu no longer lends to project beta")); why != "pool gpu no longer lends to project beta" {
		t.Errorf("a drain's message read back: %q", why)
	}
	for _, message := range []string{"", "running on host-1", DrainAsked("")} {
		if why := WhyDrained(message); why != "the owner withdrew the host" {
			t.Errorf("%q read as a drain's, why %q", message, why)
		}
	}
}
