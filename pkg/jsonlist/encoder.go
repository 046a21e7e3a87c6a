package jsonlist

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// flushBytes is how much of a list is written at a time; the first write
// is past the library's gzip threshold (128 KiB), as one whole list was.
const flushBytes = 256 << 10

// NegotiatedSerializer is inner whose JSON serializer writes the lists
// that listed says are lists of stored objects with cache: the bytes are
// those of inner's JSON serializer. Everything else, and every other media
// type, is inner's.
//
// listed must say yes only for lists whose items every read returns as
// stored: the JSON of an item is reused for any object with its UID,
// resourceVersion, apiVersion and kind.
func NegotiatedSerializer(inner runtime.NegotiatedSerializer, cache *Cache, listed func(runtime.Object) bool) runtime.NegotiatedSerializer {
	infos := append([]runtime.SerializerInfo(nil), inner.SupportedMediaTypes()...)
	for i, info := range infos {
		if info.MediaType == runtime.ContentTypeJSON {
			infos[i].Serializer = &serializer{Serializer: info.Serializer, cache: cache, listed: listed}
		}
	}
	return negotiated{NegotiatedSerializer: inner, infos: infos}
}

type negotiated struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func (n negotiated) SupportedMediaTypes() []runtime.SerializerInfo { return n.infos }

// serializer decodes and identifies itself as the JSON serializer it wraps:
// what it writes is byte for byte what that one writes.
type serializer struct {
	runtime.Serializer
	cache  *Cache
	listed func(runtime.Object) bool
}

func (s *serializer) Encode(obj runtime.Object, w io.Writer) error {
	if _, cacheable := obj.(runtime.CacheableObject); cacheable || !s.listed(obj) {
		return s.Serializer.Encode(obj, w)
	}
	return s.encodeList(obj, w)
}

// encodeList writes what json.NewEncoder(w).Encode(list) writes:
// {"kind":…,"apiVersion":…,"metadata":{…},"items":[…]} and a newline.
func (s *serializer) encodeList(list runtime.Object, w io.Writer) error {
	fields := reflect.ValueOf(list).Elem()
	header, err := json.Marshal(struct {
		metav1.TypeMeta `json:",inline"`
		ListMeta        metav1.ListMeta `json:"metadata,omitempty"`
	}{fields.Field(0).Interface().(metav1.TypeMeta), fields.Field(1).Interface().(metav1.ListMeta)})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Write(header[:len(header)-1])
	if fields.Field(2).IsNil() {
		buf.WriteString(`,"items":null}` + "\n")
		_, err := w.Write(buf.Bytes())
		return err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return err
	}
	buf.WriteString(`,"items":[`)
	for i, item := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		data, err := s.itemJSON(item)
		if err != nil {
			return err
		}
		buf.Write(data)
		if buf.Len() >= flushBytes {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return err
			}
			buf.Reset()
		}
	}
	buf.WriteString("]}\n")
	_, err = w.Write(buf.Bytes())
	return err
}

// itemJSON is json.Marshal(item), from the cache when it has the item at
// its resourceVersion.
func (s *serializer) itemJSON(item runtime.Object) ([]byte, error) {
	object, err := meta.Accessor(item)
	if err != nil {
		return nil, err
	}
	typeMeta, _ := item.GetObjectKind().(*metav1.TypeMeta)
	uid, resourceVersion := object.GetUID(), object.GetResourceVersion()
	if typeMeta == nil || uid == "" || resourceVersion == "" {
		return json.Marshal(item)
	}
	if data, ok := s.cache.get(uid, resourceVersion, typeMeta.APIVersion, typeMeta.Kind); ok {
		return data, nil
	}
	data, err := json.Marshal(item)
	if err != nil {
		return nil, err
	}
	s.cache.put(uid, entry{resourceVersion: resourceVersion, apiVersion: typeMeta.APIVersion, kind: typeMeta.Kind, json: data})
	return data, nil
}

// Lists says yes for the list types of gv in scheme: those of kinds named
// …List whose struct is TypeMeta (inline), ListMeta ("metadata") and Items
// ("items"), as generated lists are; the JSON serializer writes them in
// that order.
func Lists(scheme *runtime.Scheme, gv schema.GroupVersion) func(runtime.Object) bool {
	types := map[reflect.Type]bool{}
	for kind, t := range scheme.KnownTypes(gv) {
		if strings.HasSuffix(kind, "List") && isListStruct(t) {
			types[reflect.PointerTo(t)] = true
		}
	}
	return func(obj runtime.Object) bool { return types[reflect.TypeOf(obj)] }
}

func isListStruct(t reflect.Type) bool {
	if t.Kind() != reflect.Struct || t.NumField() != 3 {
		return false
	}
	typeMeta, listMeta, items := t.Field(0), t.Field(1), t.Field(2)
	jsonName := func(f reflect.StructField) string { return f.Tag.Get("json") }
	return typeMeta.Anonymous && typeMeta.Type == reflect.TypeOf(metav1.TypeMeta{}) && jsonName(typeMeta) == ",inline" &&
		listMeta.Type == reflect.TypeOf(metav1.ListMeta{}) && jsonName(listMeta) == "metadata,omitempty" &&
		items.Name == "Items" && items.Type.Kind() == reflect.Slice && jsonName(items) == "items"
}
