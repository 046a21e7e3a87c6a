package testserver

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestTheLogKeepsItsLastLinesWhole(t *testing.T) {
	l := &serverLogs{lines: make([]string, keptLines)}
	fmt.Fprint(l, "one\ntw")
	fmt.Fprint(l, "o\nthree\n")
	if got, omitted := l.since(0, 10); strings.Join(got, "|") != "one|two|three" || omitted != 0 {
		t.Fatalf("since(0, 10) = %q, %d left out; want one, two, three, none left out", got, omitted)
	}
	mark := l.mark()
	for i := range keptLines + 5 {
		fmt.Fprintf(l, "line %d\n", i)
	}
	got, omitted := l.since(mark, 3)
	want := []string{fmt.Sprintf("line %d", keptLines+2), fmt.Sprintf("line %d", keptLines+3), fmt.Sprintf("line %d", keptLines+4)}
	if strings.Join(got, "|") != strings.Join(want, "|") || omitted != keptLines+2 {
		t.Fatalf("since(mark, 3) = %d lines from %q, %d left out; want %q, %d left out", len(got), got[0], omitted, want, keptLines+2)
	}
	// More than the ring holds: only what it still has.
	if got, omitted := l.since(mark, keptLines+100); len(got) != keptLines || omitted != 5 || got[0] != "line 5" {
		t.Fatalf("since(mark, all) = %d lines from %q, %d left out; want %d from line 5, 5 left out", len(got), got[0], omitted, keptLines)
	}
}

// failedTB is a test that has failed, whose messages are kept.
type failedTB struct {
	testing.TB
	cleanups []func()
	logged   []string
}

func (f *failedTB) Failed() bool      { return true }
func (f *failedTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *failedTB) Logf(format string, args ...any) {
	f.logged = append(f.logged, fmt.Sprintf(format, args...))
}
func (f *failedTB) Name() string { return "TestThatFailed" }
func (f *failedTB) Helper()      {}

// end runs the cleanups, the last registered first, as testing does.
func (f *failedTB) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestAFailedTestShowsWhatTheServerLoggedDuringIt(t *testing.T) {
	capture()
	klog.InfoS("before the test")
	failed := &failedTB{TB: t}
	KeepLogs(failed)
	KeepLogs(failed) // a second server in the same test: one showing
	klog.InfoS("during the test", "step", 1)
	klog.ErrorS(nil, "an error during the test")
	klog.Flush()
	failed.end()
	if len(failed.logged) != 1 {
		t.Fatalf("the failed test logged %d messages, want 1: %q", len(failed.logged), failed.logged)
	}
	shown := failed.logged[0]
	for _, want := range []string{`"during the test" step=1`, `"an error during the test"`, "TestThatFailed failed"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the failed test's message lacks %q:\n%s", want, shown)
		}
	}
	if strings.Contains(shown, "before the test") || strings.Count(shown, "an error during the test") != 1 {
		t.Errorf("the failed test's message shows a line from before it, or a line twice:\n%s", shown)
	}
}
