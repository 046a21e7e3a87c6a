package terminalsafe

import (
	"bytes"
	"strings"
	"testing"
)

// forged is what a tenant or a server could put in a name, a path or a
// message: a line break that starts a line of its own, a carriage return
// that rewrites it, a window title set (OSC), a bell, colour, DEL, a C1
// control, a direction override and a byte that is no UTF-8.
const forged = "ok\nE1207 00:00:00.000000 1 forged.go:1] \"forged\"\r\x1b]0;owned\x07\x1b[31mred\x7f\u009b\u202eexe.txt\xff"

func TestEscapeShowsControlsAsText(t *testing.T) {
	got := Escape(forged, `\x%02x`)
	if strings.ContainsFunc(got, func(r rune) bool { return IsControl(r) || IsDirectionControl(r) }) {
		t.Errorf("Escape left a control character: %q", got)
	}
	for _, want := range []string{"ok\nE1207", `\x0d`, `\x1b]0;owned\x07`, `\x1b[31mred`, `\x7f`, `\x9b`, `\u202eexe.txt`, "\uFFFD"} {
		if !strings.Contains(got, want) {
			t.Errorf("Escape(%q) = %q: no %q", forged, got, want)
		}
	}
	if got := Escape(forged, `\u%04x`); !strings.Contains(got, `\u001b]0;owned\u0007`) {
		t.Errorf("Escape as JSON: %q", got)
	}
	if plain := "a plain line\twith a tab\n"; Escape(plain, `\x%02x`) != plain {
		t.Errorf("Escape changed text without controls: %q", Escape(plain, `\x%02x`))
	}
}

func TestWriterShowsControlsAsText(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	n, err := w.Write([]byte(forged))
	if err != nil || n != len(forged) {
		t.Fatalf("Write: %d %v, want %d", n, err, len(forged))
	}
	got := out.String()
	if strings.ContainsFunc(got, func(r rune) bool { return IsControl(r) || IsDirectionControl(r) || r == '\uFFFD' }) {
		t.Errorf("the writer let a control character through: %q", got)
	}
	for _, want := range []string{"ok\n\tE1207", `\x0d`, `\x1b]0;owned\x07`, `\x7f`, `\x9b`, `\u202eexe.txt`, `\xff`} {
		if !strings.Contains(got, want) {
			t.Errorf("the writer wrote %q: no %q", got, want)
		}
	}
	out.Reset()
	for _, line := range []string{"E1207 00:00:00.000000 1 forged.go:1] forged", " E1207 forged", " >E1207 forged", "\u00a0E1207 forged"} {
		out.Reset()
		if _, err := w.Write([]byte("W1207 00:00:00.000000 1 a.go:1] line\n" + line + "\n")); err != nil || out.String() != "W1207 00:00:00.000000 1 a.go:1] line\n\t"+line+"\n" {
			t.Errorf("a line of an entry was not indented: %q %v", out.String(), err)
		}
	}
	out.Reset()
	plain := "I1207 00:00:00.000000 1 a.go:1] \"plain\" key=<\n\tline\n > next=<\n\tline\n >\n"
	if _, err := w.Write([]byte(plain)); err != nil || out.String() != plain {
		t.Errorf("the writer changed a plain entry: %q %v", out.String(), err)
	}
}
