// Package terminalsafe shows text that crossed a trust boundary (from a
// server, an agent, a tenant) as text only: the control characters a
// terminal would act on (escape sequences that rewrite lines, set the
// clipboard, retitle the window) are shown escaped, as \x1b, and so are
// Unicode's direction controls, as \u202e.
package terminalsafe

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// IsControl says whether r is a control character a terminal acts on (C0
// but newline and tab, DEL, C1).
func IsControl(r rune) bool {
	return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f)
}

// IsDirectionControl says whether r is one of Unicode's embeddings,
// overrides or isolates: a terminal that honours them shows the text after
// it in another order than it has ("Trojan Source"), so a name or message
// could read as something it is not.
func IsDirectionControl(r rune) bool {
	return (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// shownEscaped says whether r is shown escaped rather than as itself.
func shownEscaped(r rune) bool { return IsControl(r) || IsDirectionControl(r) }

// Escape is s with every control character written as format writes it
// (`\x%02x`, or `\u%04x` inside a JSON string), every direction control as
// \uNNNN, and invalid UTF-8 replaced. Newlines and tabs stay.
func Escape(s, format string) string {
	if !strings.ContainsFunc(s, shownEscaped) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case IsControl(r):
			fmt.Fprintf(&b, format, r)
		case IsDirectionControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Writer writes log entries, one a Write, as text only: their control
// characters escaped as Escape does, each byte that is no UTF-8 as \xNN,
// and every line of an entry but its first indented with a tab where it
// is not already (klog indents a value's lines with a tab and ends the
// value with " >", but writes an unstructured message with line breaks as
// it is): no value, whoever chose it, writes an escape sequence to the
// terminal that reads the log, or a line that reads as an entry of its
// own. Entries written at once are written one after the other.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter is a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes the entry p as text and reports all of p written when the
// writer below took it all.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !bytes.ContainsFunc(p, shownEscaped) && utf8.Valid(p) && !startsALine(p) {
		return w.w.Write(p)
	}
	b := make([]byte, 0, len(p)+32)
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == '\n':
			b = append(b, '\n')
			if i+1 < len(p) && !indented(p[i+1:]) {
				b = append(b, '\t')
			}
		case r == utf8.RuneError && size == 1:
			b = fmt.Appendf(b, `\x%02x`, p[i])
		case IsControl(r):
			b = fmt.Appendf(b, `\x%02x`, r)
		case IsDirectionControl(r):
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = append(b, p[i:i+size]...)
		}
		i += size
	}
	if _, err := w.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// startsALine says whether a line break inside entry (not its last byte)
// starts a line klog would not have: one not indented.
func startsALine(entry []byte) bool {
	for i, c := range entry[:max(len(entry)-1, 0)] {
		if c == '\n' && !indented(entry[i+1:]) {
			return true
		}
	}
	return false
}

// indented says whether line, which follows a line break of an entry, is
// one klog writes: a value's line (a tab first) or the end of a value
// (" >", then a space before the next value or the entry's end).
func indented(line []byte) bool {
	if len(line) > 0 && line[0] == '\t' {
		return true
	}
	return bytes.HasPrefix(line, []byte(" >")) && (len(line) == 2 || line[2] == ' ' || line[2] == '\n')
}
