package validation

import (
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The times an object may hold: those its JSON form can carry back. A
// metav1.Time is written as RFC 3339 in UTC, whose year has four digits;
// one parsed from a far offset ("9999-12-31T23:00:00-02:00") or sent in
// protobuf seconds is written as year 10000, and the store, which decodes
// what it wrote, answered 500 after the write and then failed every read
// and list of the kind (StorageReadError) — a tenant's managedFields time
// could stop the scheduler's informers.
var (
	earliestTime = time.Date(0, time.January, 1, 0, 0, 0, 0, time.UTC)
	latestTime   = time.Date(9999, time.December, 31, 23, 59, 59, 999999999, time.UTC)
)

var (
	timeType      = reflect.TypeFor[metav1.Time]()
	microTimeType = reflect.TypeFor[metav1.MicroTime]()
)

// ValidateTimes refuses every time in obj (spec, status, conditions,
// metadata.managedFields) that its JSON form cannot carry back, with its
// field path.
func ValidateTimes(obj interface{}) field.ErrorList {
	v := reflect.ValueOf(obj)
	if !typeHoldsTimes(v.Type()) {
		return nil
	}
	var errs field.ErrorList
	for _, bad := range badTimes(v) {
		path := (*field.Path)(nil)
		for i := len(bad.steps) - 1; i >= 0; i-- {
			path = bad.steps[i].of(path)
		}
		errs = append(errs, field.Invalid(path, bad.value.Format(time.RFC3339Nano),
			"must be from 0000-01-01T00:00:00Z to 9999-12-31T23:59:59Z (a four-digit year in UTC)"))
	}
	return errs
}

// step is one element of a field path, kept innermost first while the walk
// unwinds, so that a valid object's walk builds none.
type step struct {
	name  string
	index int
	key   *string
}

func (s step) of(parent *field.Path) *field.Path {
	switch {
	case s.key != nil:
		return parent.Key(*s.key)
	case s.name == "":
		return parent.Index(s.index)
	case parent == nil:
		return field.NewPath(s.name)
	}
	return parent.Child(s.name)
}

type badTime struct {
	value time.Time
	steps []step
}

func badTimes(v reflect.Value) []badTime {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return badTimes(v.Elem())
	case reflect.Struct:
		if v.Type() != timeType && v.Type() != microTimeType {
			return badFieldTimes(v)
		}
		t := timeOf(v)
		if t.IsZero() || !t.Before(earliestTime) && !t.After(latestTime) {
			return nil
		}
		return []badTime{{value: t}}
	case reflect.Slice, reflect.Array:
		if !typeHoldsTimes(v.Type().Elem()) {
			return nil
		}
		var bad []badTime
		for i := 0; i < v.Len(); i++ {
			bad = append(bad, within(badTimes(v.Index(i)), step{index: i})...)
		}
		return bad
	case reflect.Map:
		if !typeHoldsTimes(v.Type().Elem()) {
			return nil
		}
		var bad []badTime
		for it := v.MapRange(); it.Next(); {
			key := keyString(it.Key())
			bad = append(bad, within(badTimes(it.Value()), step{key: &key})...)
		}
		return bad
	}
	return nil
}

// timeOf reads a metav1.Time or MicroTime, through its address where it
// has one (a copy into an interface would allocate).
func timeOf(v reflect.Value) time.Time {
	switch {
	case v.CanAddr() && v.Type() == timeType:
		return v.Addr().Interface().(*metav1.Time).Time
	case v.CanAddr():
		return v.Addr().Interface().(*metav1.MicroTime).Time
	case v.Type() == timeType:
		return v.Interface().(metav1.Time).Time
	}
	return v.Interface().(metav1.MicroTime).Time
}

func badFieldTimes(v reflect.Value) []badTime {
	var bad []badTime
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() || !typeHoldsTimes(f.Type) {
			continue
		}
		name, inline := jsonName(f)
		if name == "-" {
			continue
		}
		found := badTimes(v.Field(i))
		if !inline {
			found = within(found, step{name: name})
		}
		bad = append(bad, found...)
	}
	return bad
}

func within(bad []badTime, s step) []badTime {
	for i := range bad {
		bad[i].steps = append(bad[i].steps, s)
	}
	return bad
}

// jsonName is a field's name in JSON, and whether its fields are its
// parent's (embedded without a name, or ",inline").
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	name, options, _ := strings.Cut(tag, ",")
	if strings.Contains(","+options+",", ",inline,") || name == "" && f.Anonymous {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}

func keyString(k reflect.Value) string {
	if k.Kind() == reflect.String {
		return k.String()
	}
	if k.CanInt() {
		return strconv.FormatInt(k.Int(), 10)
	}
	return k.Type().String()
}

// holdsTimes caches, per type, whether a value of it can hold a time: the
// walk then passes over strings, numbers and the structs without times.
var holdsTimes sync.Map

func typeHoldsTimes(t reflect.Type) bool {
	if held, ok := holdsTimes.Load(t); ok {
		return held.(bool)
	}
	held := mayHoldTimes(t, map[reflect.Type]bool{})
	holdsTimes.Store(t, held)
	return held
}

func mayHoldTimes(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == timeType || t == microTimeType {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return mayHoldTimes(t.Elem(), seen)
	case reflect.Interface:
		return true
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).IsExported() && mayHoldTimes(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}
