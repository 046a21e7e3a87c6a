package executions

import (
	"sync"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// tail keeps the last Limit bytes written to it and counts what it dropped:
// an execution may print without bound, the agent keeps a bounded tail.
type tail struct {
	Limit int

	mu      sync.Mutex
	data    []byte
	dropped int64
	version int64 // counts writes, so the uploader knows when there is news
}

func newTail() *tail { return &tail{Limit: nodusv1.MaxExecutionLogBytes} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.data = append(t.data, p...)
	// Keep up to twice the limit so that a program printing line by line
	// does not make every write move the whole tail.
	if over := len(t.data) - t.Limit; len(t.data) > 2*t.Limit {
		t.dropped += int64(over)
		t.data = append(t.data[:0], t.data[over:]...)
	}
	t.version++
	return len(p), nil
}

// Snapshot returns the kept tail, the bytes dropped before it and the version.
func (t *tail) Snapshot() (string, int64, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if over := len(t.data) - t.Limit; over > 0 {
		return string(t.data[over:]), t.dropped + int64(over), t.version
	}
	return string(t.data), t.dropped, t.version
}
