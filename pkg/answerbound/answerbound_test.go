package answerbound

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// server answers ?size=N bytes of small JSON values ("{}"), with the
// status ?code= (200 when none).
func server(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		size, _ := strconv.Atoi(req.URL.Query().Get("size"))
		if code, _ := strconv.Atoi(req.URL.Query().Get("code")); code != 0 {
			w.WriteHeader(code)
		}
		_, _ = io.WriteString(w, strings.Repeat("{}", size/2)+strings.Repeat(" ", size%2))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// read reads the answer to query whole, as client-go does, and says how
// many bytes it read.
func read(t *testing.T, ctx context.Context, srv *httptest.Server, query string) (int, error) {
	t.Helper()
	client := &http.Client{Transport: Transport{Next: http.DefaultTransport, Answer: 1 << 10, WatchEvent: 16}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return len(body), err
}

func TestAnAnswerIsBoundedAsAWhole(t *testing.T) {
	srv := server(t)
	ctx := context.Background()
	if n, err := read(t, ctx, srv, "size=1024"); err != nil || n != 1<<10 {
		t.Errorf("an answer of the bound: %d bytes, %v", n, err)
	}
	var tooLarge *TooLargeError
	if _, err := read(t, ctx, srv, "size=1025"); !errors.As(err, &tooLarge) || tooLarge.Of != AnAnswer || err.Error() != "the server's answer is larger than 1 KiB" {
		t.Errorf("an answer past the bound: %v", err)
	}
	// A watch's events, each within its bound, are as many as come.
	if n, err := read(t, ctx, srv, "size=4096&watch=true"); err != nil || n != 4<<10 {
		t.Errorf("a watch of 2,048 small events: %d bytes, %v", n, err)
	}
	if n, err := read(t, ctx, srv, "size=4096"+"&watch=true"+"&code=500"); !errors.As(err, &tooLarge) || tooLarge.Of != AnAnswer {
		t.Errorf("a watch's error answer of 2,048 small values, past the answer bound: %d bytes, %v", n, err)
	}
}

// TestAStreamIsItsCallers: a heartbeat stream is read line by line for as
// long as the agent beats; bounded as a whole it would end after so many
// beats. Its error answer is read whole by client-go, and is bounded.
func TestAStreamIsItsCallers(t *testing.T) {
	srv := server(t)
	ctx := Streamed(context.Background())
	if n, err := read(t, ctx, srv, "size=4096"); err != nil || n != 4<<10 {
		t.Errorf("a stream past the answer bound: %d bytes, %v", n, err)
	}
	var tooLarge *TooLargeError
	if _, err := read(t, ctx, srv, "size=4096&code=503"); !errors.As(err, &tooLarge) || tooLarge.Of != AnAnswer {
		t.Errorf("a stream's error answer past the answer bound: %v", err)
	}
}

func TestAnswersUnderOneBoundShareIt(t *testing.T) {
	srv := server(t)
	ctx := WithOneBound(context.Background(), 1<<10)
	for i := range 2 {
		if n, err := read(t, ctx, srv, "size=512"); err != nil || n != 512 {
			t.Fatalf("answer %d of 512 bytes under one bound of 1 KiB: %d bytes, %v", i+1, n, err)
		}
	}
	var tooLarge *TooLargeError
	if _, err := read(t, ctx, srv, "size=1"); !errors.As(err, &tooLarge) || tooLarge.Of != Answers ||
		err.Error() != "the server's answers to this command are larger than 1 KiB in all" {
		t.Errorf("a byte past the shared bound: %v", err)
	}
}

func TestAnEventPastItsBoundIsRefused(t *testing.T) {
	// The count starts again after each top-level value; 17 bytes of one
	// value pass a bound of 16, whatever its strings hold.
	for stream, refused := range map[string]bool{
		`{"a":"xxxxxxxx"}` + `{"a":"xxxxxxxx"}`: false,
		`{"a":"xxxxxxxxx"}`:                     true,
		`{"a":"}}}}\"}}}"}` + "\n":              true,
		"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n{}":    true,
		`"xxxxxxxxxxxxxx"` + `"xxxxxxxxxxxxxx"`: false,
	} {
		b := &events{ReadCloser: io.NopCloser(strings.NewReader(stream)), bound: 16, refuse: func(e *TooLargeError) error { return e }}
		_, err := io.ReadAll(b)
		var tooLarge *TooLargeError
		if got := errors.As(err, &tooLarge); got != refused || (got && err.Error() != "an event of the server's watch is larger than 16 bytes") {
			t.Errorf("%q with a bound of 16 bytes an event: %v", stream, err)
		}
	}
}

// TestABodyOfExactlyTheBoundEnds: read a byte at a time, an answer of
// exactly the bound ends with EOF, and one byte more is refused.
func TestABodyOfExactlyTheBoundEnds(t *testing.T) {
	for _, c := range []struct {
		size    int
		refused bool
	}{{16, false}, {17, true}} {
		left := int64(16)
		b := &body{ReadCloser: io.NopCloser(strings.NewReader(strings.Repeat("x", c.size))), left: &left, bound: 16, refuse: func(e *TooLargeError) error { return e }}
		got, err := io.ReadAll(io.LimitReader(oneByteReader{b}, 1<<10))
		if refused := err != nil; refused != c.refused || (!c.refused && len(got) != c.size) {
			t.Errorf("a body of %d bytes, bound 16: %d bytes read, %v", c.size, len(got), err)
		}
	}
}

type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

// TestAProtobufFramePastItsBoundIsRefused: a protobuf watch is frames, a
// length and that many bytes, which no JSON structure ends: counted as
// JSON, a watch of small frames would have been cut after the bound of
// one event in all. Each frame is held to the bound, at its length.
func TestAProtobufFramePastItsBoundIsRefused(t *testing.T) {
	length := func(size int) string {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(size))
		return string(b[:])
	}
	frame := func(size int) string { return length(size) + strings.Repeat("\x0a", size) }
	var stream string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
		_, _ = io.WriteString(w, stream)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		stream  string
		refused bool
	}{
		{strings.Repeat(frame(12), 512), false},
		{frame(16) + frame(0) + frame(16), false},
		{frame(16) + frame(17), true},
		// Refused at the length, before any of the frame is read.
		{frame(1) + length(1<<30), true},
	} {
		stream = tc.stream
		n, err := read(t, context.Background(), srv, "watch=true")
		var tooLarge *TooLargeError
		if refused := errors.As(err, &tooLarge); refused != tc.refused || (!refused && (err != nil || n != len(tc.stream))) {
			t.Errorf("frames of %d bytes in all, a bound of 16 a frame: %d read, %v", len(tc.stream), n, err)
		}
	}
}
