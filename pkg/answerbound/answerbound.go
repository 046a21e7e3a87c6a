// Package answerbound bounds what a client of a nodus-server reads of its
// answers: client-go reads an answer whole into memory, and a watch for as
// long as the server keeps it open, so a server (hostile, or at fault) that
// sends an endless answer or event would otherwise have the client buffer
// it. An answer read whole is bounded as a whole; a watch, event by event
// (JSON's, or protobuf's frames);
// a stream its caller reads itself (Streamed), not at all while it is
// answered with success.
package answerbound

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// TooLargeError is a refusal of an answer past its bound.
type TooLargeError struct {
	// Bound is the bound in bytes.
	Bound int64
	// Of is what was bounded.
	Of Bounded
}

// Bounded names what a bound holds.
type Bounded int

const (
	// AnAnswer is an answer read whole.
	AnAnswer Bounded = iota
	// Answers are several answers under one bound (WithOneBound).
	Answers
	// AWatchEvent is one event of a watch.
	AWatchEvent
)

// WatchEventTooLargeText begins the words of a refused watch event. They
// reach the watch's reader only as the text of an error event (client-go
// makes one of a stream it cannot read), which a reader knows them by.
const WatchEventTooLargeText = "an event of the server's watch is larger than"

func (e *TooLargeError) Error() string {
	switch e.Of {
	case Answers:
		return fmt.Sprintf("the server's answers to this command are larger than %s in all", SizeText(e.Bound))
	case AWatchEvent:
		return fmt.Sprintf("%s %s", WatchEventTooLargeText, SizeText(e.Bound))
	default:
		return fmt.Sprintf("the server's answer is larger than %s", SizeText(e.Bound))
	}
}

// SizeText is a bound in the largest of MiB, KiB and bytes it is whole in.
func SizeText(bytes int64) string {
	switch {
	case bytes%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", bytes>>20)
	case bytes%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", bytes>>10)
	}
	return fmt.Sprintf("%d bytes", bytes)
}

// Transport bounds the answers Next gives.
type Transport struct {
	Next http.RoundTripper
	// Answer bounds an answer read whole (every answer but a watch's
	// events and a Streamed request's successful stream).
	Answer int64
	// WatchEvent bounds one event of a watch: in JSON counted from the end
	// of the event before it, in protobuf the frame's length.
	WatchEvent int64
	// Refuse, when set, makes the error a read past a bound fails with
	// (the caller's reason for it); else it is the *TooLargeError.
	Refuse func(*TooLargeError) error
}

func (t Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.Next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	// An error answer is read whole, a watch's and a stream's too.
	succeeded := resp.StatusCode >= 200 && resp.StatusCode <= 299
	switch {
	case succeeded && req.Context().Value(streamedKey{}) != nil:
		return resp, nil
	case succeeded && req.URL.Query().Get("watch") == "true":
		if strings.Contains(resp.Header.Get("Content-Type"), "protobuf") {
			resp.Body = &frames{ReadCloser: resp.Body, bound: t.WatchEvent, refuse: t.refuse}
		} else {
			resp.Body = &events{ReadCloser: resp.Body, bound: t.WatchEvent, refuse: t.refuse}
		}
		return resp, nil
	}
	if shared, ok := req.Context().Value(sharedKey{}).(*shared); ok {
		resp.Body = &body{ReadCloser: resp.Body, left: &shared.left, bound: shared.bound, of: Answers, refuse: t.refuse}
		return resp, nil
	}
	left := t.Answer
	resp.Body = &body{ReadCloser: resp.Body, left: &left, bound: t.Answer, of: AnAnswer, refuse: t.refuse}
	return resp, nil
}

func (t Transport) refuse(e *TooLargeError) error {
	if t.Refuse == nil {
		return e
	}
	return t.Refuse(e)
}

type streamedKey struct{}

// Streamed marks the requests made under ctx as streams their caller reads
// and bounds itself (a heartbeat stream's lines): their successful answers
// are not bounded as a whole, their error answers are.
func Streamed(ctx context.Context) context.Context {
	return context.WithValue(ctx, streamedKey{}, true)
}

type sharedKey struct{}

// shared is what is left of one bound to the answers of a WithOneBound
// context.
type shared struct{ bound, left int64 }

// WithOneBound has the answers read under ctx, one after the other, share
// one bound: a listing made of many (each project's hosts in turn) holds
// them all, and a server chooses how many there are.
func WithOneBound(ctx context.Context, bound int64) context.Context {
	return context.WithValue(ctx, sharedKey{}, &shared{bound: bound, left: bound})
}

// body refuses what is read past left, of bound.
type body struct {
	io.ReadCloser
	left   *int64
	bound  int64
	of     Bounded
	refuse func(*TooLargeError) error
}

func (b *body) tooLarge() error { return b.refuse(&TooLargeError{Bound: b.bound, Of: b.of}) }

func (b *body) Read(p []byte) (int, error) {
	if *b.left < 0 {
		return 0, b.tooLarge()
	}
	if int64(len(p)) > *b.left+1 {
		p = p[:*b.left+1] // one byte more tells a body of exactly the bound (EOF) from a longer one
	}
	n, err := b.ReadCloser.Read(p)
	*b.left -= int64(n)
	if *b.left < 0 {
		return n, b.tooLarge()
	}
	return n, err
}

// events refuses a watch's stream at an event longer than bound. It
// follows the JSON's structure as far as it must to tell where a top-level
// value ends (strings, with their escapes, and nesting); the decoder
// refuses what is no JSON. An event is counted from the end of the one
// before, the whitespace between them included: client-go's decoder holds
// all of it until the event's JSON value ends, whatever lines it spans.
type events struct {
	io.ReadCloser
	bound  int64
	refuse func(*TooLargeError) error
	// used is what was read since the last event ended.
	used              int64
	depth             int
	inString, escaped bool
	refused           bool
}

func (b *events) Read(p []byte) (int, error) {
	if b.refused {
		return 0, b.tooLarge()
	}
	n, err := b.ReadCloser.Read(p)
	for _, c := range p[:n] {
		// Counted before the byte that ends an event resets the count:
		// that byte is the event's.
		if b.used++; b.used > b.bound {
			b.refused = true
			return n, b.tooLarge()
		}
		switch {
		case b.escaped:
			b.escaped = false
		case b.inString:
			switch c {
			case '\\':
				b.escaped = true
			case '"':
				b.inString = false
				if b.depth == 0 {
					b.used = 0
				}
			}
		case c == '"':
			b.inString = true
		case c == '{' || c == '[':
			b.depth++
		case c == '}' || c == ']':
			if b.depth > 0 {
				b.depth--
			}
			if b.depth == 0 {
				b.used = 0
			}
		}
	}
	return n, err
}

func (b *events) tooLarge() error {
	return b.refuse(&TooLargeError{Bound: b.bound, Of: AWatchEvent})
}

// frames refuses a protobuf watch's stream at a frame longer than bound:
// each event is a 4-byte big-endian length and that many bytes, and
// client-go's framer reads a frame whole, of the length it names.
type frames struct {
	io.ReadCloser
	bound  int64
	refuse func(*TooLargeError) error
	// header holds the length's bytes read so far; left is what is still
	// to come of the frame it named.
	header  [4]byte
	read    int
	left    int64
	refused bool
}

func (f *frames) Read(p []byte) (int, error) {
	if f.refused {
		return 0, f.tooLarge()
	}
	n, err := f.ReadCloser.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		if f.left > 0 {
			skip := min(f.left, int64(len(rest)))
			f.left -= skip
			rest = rest[skip:]
			continue
		}
		f.header[f.read] = rest[0]
		f.read++
		rest = rest[1:]
		if f.read < len(f.header) {
			continue
		}
		f.read = 0
		if f.left = int64(binary.BigEndian.Uint32(f.header[:])); f.left > f.bound {
			f.refused = true
			return n, f.tooLarge()
		}
	}
	return n, err
}

func (f *frames) tooLarge() error {
	return f.refuse(&TooLargeError{Bound: f.bound, Of: AWatchEvent})
}
