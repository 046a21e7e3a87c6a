// Package typemeta finds an object's apiVersion and kind in JSON that the
// Nodus server wrote itself (what it stores in etcd, and what it sends its
// own in-process clients), without reading the whole document.
//
// apimachinery's JSON serializer finds them with encoding/json over the whole
// object before it decodes the object again: at a restart that first pass
// was 15 % of the server's CPU (docs/performance.md). The server's encoder
// writes kind and apiVersion as an object's first two keys, so they can be
// read there. Anything else falls back to apimachinery's reading.
package typemeta

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// Leading is a json.MetaFactory that reads apiVersion and kind where the
// server's encoder puts them, and otherwise asks json.DefaultMetaFactory.
//
// Only for JSON written by the server: on a document that repeats kind or
// apiVersion after its leading pair, it answers the first, where encoding/json
// takes the last (and on a watch event's envelope with a kind after its
// object, none), and it does not check that the rest of the document is
// JSON (the decoding that follows does). No encoder of the server writes a key
// twice; request bodies from clients keep apimachinery's reading.
type Leading struct{}

var _ json.MetaFactory = Leading{}

// Interpret implements json.MetaFactory.
func (Leading) Interpret(data []byte) (*schema.GroupVersionKind, error) {
	apiVersion, kind, ok := leadingPair(data)
	if !ok {
		return json.DefaultMetaFactory.Interpret(data)
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	return &schema.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: kind}, nil
}

// Serializer is apimachinery's JSON serializer (not pretty, not strict, as
// in a CodecFactory) with the Leading meta factory.
func Serializer(scheme *runtime.Scheme) *json.Serializer {
	return json.NewSerializerWithOptions(Leading{}, scheme, scheme, json.SerializerOptions{})
}

// leadingPair reads the first two members of a top-level object when they
// are "kind" and "apiVersion" (in either order) with plain string values: no
// escapes, which encoding/json would have to unquote. A watch event, whose
// envelope the server writes as {"type":…,"object":…}, has neither: it
// answers empty strings, as encoding/json would.
func leadingPair(data []byte) (apiVersion, kind string, ok bool) {
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return "", "", false
	}
	i++
	var haveVersion, haveKind bool
	for member := 0; member < 2; member++ {
		if member > 0 {
			if i = skipSpace(data, i); i == len(data) || data[i] != ',' {
				return "", "", false
			}
			i++
		}
		keyStart, keyEnd, found := plainString(data, skipSpace(data, i))
		if !found {
			return "", "", false
		}
		if i = skipSpace(data, keyEnd+1); i == len(data) || data[i] != ':' {
			return "", "", false
		}
		valueStart, valueEnd, found := plainString(data, skipSpace(data, i+1))
		if !found {
			return "", "", false
		}
		i = valueEnd + 1
		switch string(data[keyStart:keyEnd]) {
		case "type":
			if member == 0 && watchEventObjectFollows(data, i) {
				return "", "", true
			}
			return "", "", false
		case "apiVersion":
			if haveVersion {
				return "", "", false
			}
			apiVersion, haveVersion = string(data[valueStart:valueEnd]), true
		case "kind":
			if haveKind {
				return "", "", false
			}
			kind, haveKind = string(data[valueStart:valueEnd]), true
		default:
			return "", "", false
		}
	}
	return apiVersion, kind, true
}

// watchEventObjectFollows says whether data[i:] continues a watch event's
// envelope after its type: with the member "object".
func watchEventObjectFollows(data []byte, i int) bool {
	if i = skipSpace(data, i); i == len(data) || data[i] != ',' {
		return false
	}
	keyStart, keyEnd, found := plainString(data, skipSpace(data, i+1))
	if !found || string(data[keyStart:keyEnd]) != "object" {
		return false
	}
	i = skipSpace(data, keyEnd+1)
	return i < len(data) && data[i] == ':'
}

// plainString finds the JSON string starting at data[i]; start and end
// bound its contents. It refuses strings with escapes, control characters
// or bytes beyond ASCII, which encoding/json would unquote or replace.
func plainString(data []byte, i int) (start, end int, ok bool) {
	if i >= len(data) || data[i] != '"' {
		return 0, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return i + 1, j, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return 0, 0, false
		}
	}
	return 0, 0, false
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// NegotiatedSerializer speaks JSON through Serializer, for clients of the
// server inside its own process: what a generated clientset gets from a
// CodecFactory's WithoutConversion, but reading kind and apiVersion where
// the server writes them.
func NegotiatedSerializer(scheme *runtime.Scheme) runtime.NegotiatedSerializer {
	s := Serializer(scheme)
	return negotiated{scheme: scheme, info: runtime.SerializerInfo{
		MediaType:        runtime.ContentTypeJSON,
		MediaTypeType:    "application",
		MediaTypeSubType: "json",
		EncodesAsText:    true,
		Serializer:       s,
		StreamSerializer: &runtime.StreamSerializerInfo{EncodesAsText: true, Serializer: s, Framer: json.Framer},
	}}
}

type negotiated struct {
	scheme *runtime.Scheme
	info   runtime.SerializerInfo
}

func (n negotiated) SupportedMediaTypes() []runtime.SerializerInfo {
	return []runtime.SerializerInfo{n.info}
}

func (n negotiated) EncoderForVersion(encoder runtime.Encoder, version runtime.GroupVersioner) runtime.Encoder {
	return runtime.WithVersionEncoder{Version: version, Encoder: encoder, ObjectTyper: n.scheme}
}

func (n negotiated) DecoderToVersion(decoder runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return runtime.WithoutVersionDecoder{Decoder: decoder}
}
