package v1

import (
	"bytes"
	"strconv"
)

// The log an execution's GET executions/NAME/log answers is text for a
// person to read (kubectl get --raw): where output before it was not kept,
// a note line says how much. The note's words are fixed, since clients
// (nodus executions logs -f) read the count back.
const (
	logNotePrefix = "[nodus: "
	logNoteSuffix = " earlier bytes of output were not kept]\n"
)

// ExecutionLogBody is the answer of GET executions/NAME/log: the kept
// output, after a note on the bytes before it that were not kept. Where
// the output itself begins as a note does (an execution may print
// anything), a note stands before it even when nothing was dropped, so
// that a first line that reads as a note is always the server's.
func ExecutionLogBody(dropped int64, data []byte) []byte {
	if dropped <= 0 && !bytes.HasPrefix(data, []byte(logNotePrefix)) {
		return data
	}
	note := logNotePrefix + strconv.FormatInt(max(dropped, 0), 10) + logNoteSuffix
	return append([]byte(note), data...)
}

// SplitExecutionLog is ExecutionLogBody undone: the bytes not kept before
// the output, and the output. A body whose first line is not exactly a
// note is all output.
func SplitExecutionLog(body []byte) (dropped int64, data []byte) {
	rest, ok := bytes.CutPrefix(body, []byte(logNotePrefix))
	if !ok {
		return 0, body
	}
	digits := 0
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		digits++
	}
	n, err := strconv.ParseInt(string(rest[:digits]), 10, 64)
	after, ok := bytes.CutPrefix(rest[digits:], []byte(logNoteSuffix))
	if err != nil || !ok {
		return 0, body
	}
	return n, after
}
