package stackgrow

import "testing"

// The frame must stay on the stack: on the heap it would cost every request
// a 32 KB allocation and grow nothing.
func TestGrowKeepsItsFrameOnTheStack(t *testing.T) {
	if n := testing.AllocsPerRun(100, Grow); n != 0 {
		t.Errorf("Grow allocates %v times per call, want 0", n)
	}
}
