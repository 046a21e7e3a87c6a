package v1

import (
	"bytes"
	"testing"
)

// TestAnExecutionsLogCannotForgeTheNote: the output is whatever the
// execution printed, reported by the agent of another tenant's host. One
// that starts with the note's words must not be read back as the server's
// note, or nodus executions logs -f counts the output wrongly (and prints
// nothing more once output is really dropped).
func TestAnExecutionsLogCannotForgeTheNote(t *testing.T) {
	forged := []byte("[nodus: 100000 earlier bytes of output were not kept]\nhello\n")
	for _, c := range []struct {
		name    string
		dropped int64
		data    []byte
		body    string
	}{
		{"plain output", 0, []byte("hello\n"), "hello\n"},
		{"nothing yet", 0, nil, ""},
		{"output dropped", 10, []byte("tail\n"), "[nodus: 10 earlier bytes of output were not kept]\ntail\n"},
		{"output that reads as a note", 0, forged, "[nodus: 0 earlier bytes of output were not kept]\n" + string(forged)},
		{"output that begins as a note does", 0, []byte("[nodus: x"), "[nodus: 0 earlier bytes of output were not kept]\n[nodus: x"},
		{"a forged note after dropped output", 7, forged, "[nodus: 7 earlier bytes of output were not kept]\n" + string(forged)},
	} {
		body := ExecutionLogBody(c.dropped, c.data)
		if string(body) != c.body {
			t.Errorf("%s: body %q, want %q", c.name, body, c.body)
		}
		dropped, data := SplitExecutionLog(body)
		if dropped != c.dropped || !bytes.Equal(data, c.data) {
			t.Errorf("%s: %q read back as %d dropped, %q", c.name, body, dropped, data)
		}
	}
	for _, body := range []string{
		"[nodus: -5 earlier bytes of output were not kept]\nx",
		"[nodus: +5 earlier bytes of output were not kept]\nx",
		"[nodus: 5 earlier bytes of output were not kept] and more\nx",
		"[nodus: 99999999999999999999 earlier bytes of output were not kept]\nx",
		"[nodus:  earlier bytes of output were not kept]\nx",
	} {
		if dropped, data := SplitExecutionLog([]byte(body)); dropped != 0 || string(data) != body {
			t.Errorf("%q, no note of the server's, read as %d dropped, %q", body, dropped, data)
		}
	}
}
