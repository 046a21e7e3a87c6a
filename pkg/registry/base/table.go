package base

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Column is one column of `kubectl get`: its definition and how to read it.
type Column struct {
	metav1.TableColumnDefinition
	Value func(obj runtime.Object) interface{}
}

// Table prints a kind's objects as rows of Columns, with NAME first and AGE last.
type Table struct {
	Columns []Column
}

var (
	nameColumn = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name of the object."}
	ageColumn  = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "Time since the object was created."}
)

// ConvertToTable implements rest.TableConvertor.
func (t Table) ConvertToTable(_ context.Context, object runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{nameColumn}}
	for _, c := range t.Columns {
		table.ColumnDefinitions = append(table.ColumnDefinitions, c.TableColumnDefinition)
	}
	table.ColumnDefinitions = append(table.ColumnDefinitions, ageColumn)

	add := func(obj runtime.Object) error {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		cells := []interface{}{m.GetName()}
		for _, c := range t.Columns {
			cells = append(cells, c.Value(obj))
		}
		cells = append(cells, Age(m.GetCreationTimestamp()))
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: obj}})
		return nil
	}
	if meta.IsListType(object) {
		if err := meta.EachListItem(object, add); err != nil {
			return nil, err
		}
		if l, err := meta.ListAccessor(object); err == nil {
			table.ResourceVersion = l.GetResourceVersion()
			table.Continue = l.GetContinue()
			table.RemainingItemCount = l.GetRemainingItemCount()
		}
	} else if err := add(object); err != nil {
		return nil, err
	}
	if m, err := meta.CommonAccessor(object); err == nil && table.ResourceVersion == "" {
		table.ResourceVersion = m.GetResourceVersion()
	}
	return table, nil
}

// Age renders how long ago t was, as kubectl does ("<unknown>" when unset).
func Age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// Until renders how long until t ("-" when unset, "ended" when past).
func Until(t metav1.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Until(t.Time)
	if d <= 0 {
		return "ended"
	}
	return duration.HumanDuration(d)
}

// Str renders a string cell, "-" when empty as kubectl shows absent values.
func Str(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Count renders "n× what" or "-" when n is zero.
func Count(n int, what string) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%d× %s", n, what)
}

// Col makes a Column of objects of type T.
func Col[T runtime.Object](name, typ, description string, value func(T) interface{}) Column {
	return Column{
		TableColumnDefinition: metav1.TableColumnDefinition{Name: name, Type: typ, Description: description},
		Value:                 func(o runtime.Object) interface{} { return value(o.(T)) },
	}
}
