package shutdownsignal_test

import (
	"bufio"
	"io"
	"testing"
	"time"
)

type lineReader struct{ lines chan string }

func newLineReader(r io.Reader) *lineReader {
	l := &lineReader{lines: make(chan string, 16)}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			l.lines <- s.Text()
		}
		close(l.lines)
	}()
	return l
}

func (l *lineReader) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got, ok := <-l.lines:
		if !ok || got != want {
			t.Fatalf("the child wrote %q (open: %v), want %q", got, ok, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the child did not write %q", want)
	}
}
