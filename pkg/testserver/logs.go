package testserver

import (
	"flag"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

// shownLines is how much of the server's log a failed test shows: the
// end, where the failure usually is, and short enough that a CI log's
// tail still shows which test failed.
const shownLines = 150

// keptLines bounds what the sink keeps between failures.
const keptLines = 4096

// serverLogs keeps the last lines the in-process servers logged (klog is
// the process's, so every server of a test binary writes to it). Written
// to stderr, as klog does by default, a suite's thousands of lines buried
// the one that said which test failed; kept here, a test shows them only
// when it fails (KeepLogs).
type serverLogs struct {
	mu    sync.Mutex
	lines []string // a ring of keptLines
	seq   int      // lines written so far; the next is lines[seq%keptLines]
	// partial is a line klog wrote in more than one call.
	partial strings.Builder
}

var (
	logs        = &serverLogs{lines: make([]string, keptLines)}
	captureOnce sync.Once
	kept        sync.Map // testing.TB → struct{}: KeepLogs registered for it
)

// capture sends klog's output to logs for the rest of the process.
func capture() {
	captureOnce.Do(func() {
		fs := flag.NewFlagSet("klog", flag.PanicOnError)
		klog.InitFlags(fs)
		// one_output: each line once, not once more per lower severity.
		for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false",
			"stderrthreshold": "FATAL", "one_output": "true"} {
			if err := fs.Set(name, value); err != nil {
				panic(err)
			}
		}
		klog.SetOutput(logs)
	})
}

func (l *serverLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rest := string(p)
	for {
		line, after, complete := strings.Cut(rest, "\n")
		l.partial.WriteString(line)
		if !complete {
			break
		}
		l.lines[l.seq%keptLines] = l.partial.String()
		l.seq++
		l.partial.Reset()
		rest = after
	}
	return len(p), nil
}

// mark is where the log is now.
func (l *serverLogs) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// since returns at most the last n lines written after mark, and how many
// lines after mark it left out.
func (l *serverLogs) since(mark, n int) ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := max(mark, l.seq-min(n, keptLines))
	out := make([]string, 0, l.seq-first)
	for i := first; i < l.seq; i++ {
		out = append(out, l.lines[i%keptLines])
	}
	return out, first - mark
}

// KeepLogs shows, should t fail, the end of what the in-process servers
// logged during t. StartTestServer does it for its test; a test that calls
// Start itself calls KeepLogs first.
func KeepLogs(t testing.TB) {
	t.Helper()
	capture()
	if _, done := kept.LoadOrStore(t, struct{}{}); done {
		return
	}
	mark := logs.mark()
	t.Cleanup(func() {
		defer kept.Delete(t)
		if !t.Failed() {
			return
		}
		lines, omitted := logs.since(mark, shownLines)
		// The test's own messages come before this one: the name again
		// after the log, for a reader of the output's tail.
		t.Logf("the servers' log during this test, its last %d lines (%d before them left out):\n%s\n%s failed: its messages are above the servers' log",
			len(lines), omitted, strings.Join(lines, "\n"), t.Name())
	})
}

// Logged returns the lines of the in-process servers' log, of the last
// keptLines, that contain s.
func Logged(s string) []string {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var found []string
	for i := max(0, logs.seq-keptLines); i < logs.seq; i++ {
		if line := logs.lines[i%keptLines]; strings.Contains(line, s) {
			found = append(found, line)
		}
	}
	return found
}
