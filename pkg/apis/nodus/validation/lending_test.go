package validation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// TestHostLending: the owner's view of its lending is what the scheduler
// writes; an operator's write (kubectl edit) must stay within it.
func TestHostLending(t *testing.T) {
	valid := func() *nodusv1.HostLending {
		return &nodusv1.HostLending{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "acme"}, Status: nodusv1.HostLendingStatus{
			State: nodusv1.HostLendingLent, Pool: "fra1", Epoch: 3, MaxGPUs: 8, MaxExecutions: 8, MemoryMiB: 1 << 20, MilliCPUs: 224000,
			BorrowedGPUs: 3, GPUIndices: []int32{0, 1, 5}, Executions: 2,
			Borrowers: []nodusv1.HostBorrower{{Project: "beta", GPUs: 2, Executions: 1}, {Project: "gamma", GPUs: 1, Executions: 1}},
			ChangedAt: jan}}
	}
	if errs := ValidateHostLending(valid()); len(errs) != 0 {
		t.Fatalf("the scheduler's kind of HostLending: %v", errs)
	}
	for want, change := range map[string]func(*nodusv1.HostLendingStatus){
		"status.state":                   func(s *nodusv1.HostLendingStatus) { s.State = "borrowed" },
		"status.pool":                    func(s *nodusv1.HostLendingStatus) { s.Pool = "Fra 1" },
		"status.epoch":                   func(s *nodusv1.HostLendingStatus) { s.Epoch = -1 },
		"status.maxGPUs":                 func(s *nodusv1.HostLendingStatus) { s.MaxGPUs = -8 },
		"status.borrowedGPUs":            func(s *nodusv1.HostLendingStatus) { s.BorrowedGPUs = 1 << 20 },
		"status.executions":              func(s *nodusv1.HostLendingStatus) { s.Executions = -1 },
		"status.gpuIndices[1]":           func(s *nodusv1.HostLendingStatus) { s.GPUIndices = []int32{0, 0} },
		"status.gpuIndices[0]":           func(s *nodusv1.HostLendingStatus) { s.GPUIndices = []int32{64} },
		"status.borrowers[1].project":    func(s *nodusv1.HostLendingStatus) { s.Borrowers[1].Project = "beta" },
		"status.borrowers[0].project":    func(s *nodusv1.HostLendingStatus) { s.Borrowers[0].Project = "../etc" },
		"status.borrowers[0].gpus":       func(s *nodusv1.HostLendingStatus) { s.Borrowers[0].GPUs = -1 },
		"status.borrowers[1].executions": func(s *nodusv1.HostLendingStatus) { s.Borrowers[1].Executions = -2 },
		"status.milliCPUs":               func(s *nodusv1.HostLendingStatus) { s.MilliCPUs = -1 },
	} {
		l := valid()
		change(&l.Status)
		if got := fields(ValidateHostLending(l)); got != want {
			t.Errorf("refused at %q, want %q", got, want)
		}
	}
}
