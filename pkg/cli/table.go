package cli

import (
	"fmt"
	"io"
	"strings"
)

// oneLine is a value from the server as nodus prints it on a line of its
// own or in a table cell: terminalSafe, and line breaks and tabs shown
// escaped too, so that no value makes a line, a row or a column the server
// wrote.
func oneLine(v any) string {
	s := terminalSafe(fmt.Sprint(v))
	if !strings.ContainsAny(s, "\n\t") {
		return s
	}
	return strings.NewReplacer("\n", `\x0a`, "\t", `\x09`).Replace(s)
}

// writeRow writes one row of a table to a tabwriter, each cell oneLine.
func writeRow(w io.Writer, cells ...any) {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = oneLine(c)
	}
	fmt.Fprintln(w, strings.Join(out, "\t"))
}
