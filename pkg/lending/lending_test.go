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
