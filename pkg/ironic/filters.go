package ironic

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
)

// parseBool reads a boolean as Ironic does (oslo's bool_from_string,
// strict): 1/t/true/on/y/yes and 0/f/false/off/n/no, in any case; anything
// else is a 400.
func parseBool(name, raw string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, nil
	case "0", "f", "false", "off", "n", "no":
		return false, nil
	}
	return false, errorf(http.StatusBadRequest, "Invalid value for %s: %q. Acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'", name, raw)
}

// provisionStates are Ironic's provision states, which a provision_state
// filter must name.
var provisionStates = []string{
	"enroll", "verifying", "manageable", "inspecting", "inspect wait", "inspect failed", "cleaning", "clean wait",
	"clean failed", "clean hold", "available", "deploying", "wait call-back", "deploy failed", "deploy hold", "active",
	"deleting", "error", "adopting", "adopt failed", "rescuing", "rescue wait", "rescue failed", "rescue", "unrescuing",
	"unrescue failed", "servicing", "service wait", "service failed", "service hold",
}

// faults are the node faults Ironic knows, which a fault filter must name.
var faults = []string{"power failure", "clean failure", "rescue abort failure", "service failure"}

// nodeFilter is one node list filter: the microversion it came with, and
// how a node's view answers it.
type nodeFilter struct {
	since version
	// match says whether a node passes the filter's value; nil for filters
	// that only page or select.
	match func(node row, value string) (bool, error)
}

// nodeListParams are the query parameters of GET /v1/nodes, as Ironic's
// node controller takes them. A filter on a field no Nodus node has
// (chassis, conductor, fault, description) is answered as Ironic would
// for a value no node has: an empty list. Filters of microversions above
// the maximum answer 406, as they do in Ironic below their version.
var nodeListParams = map[string]nodeFilter{
	"limit": {}, "marker": {}, "sort_key": {}, "sort_dir": {}, "fields": {since: fieldsSince}, "detail": {since: version{43}},
	"associated": {match: func(v row, raw string) (bool, error) {
		want, err := parseBool("associated", raw)
		return (asString(v.field("instance_uuid")) != "") == want, err
	}},
	"maintenance": {match: func(v row, raw string) (bool, error) {
		want, err := parseBool("maintenance", raw)
		return v.field("maintenance") == want, err
	}},
	"instance_uuid": {match: func(v row, raw string) (bool, error) {
		// As Ironic's UUID type: any spelling of a UUID, and 400 for what is none.
		uid, ok := canonicalUUID(raw)
		if !ok {
			return false, errorf(http.StatusBadRequest, "Invalid UUID for instance_uuid: %q", raw)
		}
		return asString(v.field("instance_uuid")) == uid, nil
	}},
	"chassis_uuid": {match: never},
	"provision_state": {since: version{9}, match: func(v row, raw string) (bool, error) {
		if !slices.Contains(provisionStates, raw) {
			return false, errorf(http.StatusBadRequest, "Invalid provision state %q: expected one of %s", raw, strings.Join(provisionStates, ", "))
		}
		return asString(v.field("provision_state")) == raw, nil
	}},
	"driver":         {since: version{16}, match: equalField("driver")},
	"resource_class": {since: version{21}, match: equalField("resource_class")},
	"fault": {since: version{42}, match: func(_ row, raw string) (bool, error) {
		if !slices.Contains(faults, raw) {
			return false, errorf(http.StatusBadRequest, "Unknown fault %q: expected one of %s", raw, strings.Join(faults, ", "))
		}
		return false, nil // no Nodus node has a fault
	}},
	"conductor_group": {since: version{46}, match: func(v row, raw string) (bool, error) {
		return strings.EqualFold(asString(v.field("conductor_group")), raw), nil
	}},
	"conductor":            {since: version{49}, match: never},
	"owner":                {since: version{50}, match: equalField("owner")},
	"description_contains": {since: version{51}, match: never},
	// Newer than the maximum, 1.60: always 406 here.
	"retired": {since: version{61}}, "lessee": {since: version{65}}, "project": {since: version{65}},
	"shard": {since: version{82}}, "sharded": {since: version{82}}, "include_children": {since: version{83}}, "parent_node": {since: version{83}},
}

func never(row, string) (bool, error) { return false, nil }

func equalField(field string) func(row, string) (bool, error) {
	return func(v row, raw string) (bool, error) { return asString(v.field(field)) == raw, nil }
}

// asString is a view's string field: a string, or a *string (nil: null).
func asString(v interface{}) string {
	switch s := v.(type) {
	case string:
		return s
	case *string:
		if s != nil {
			return *s
		}
	}
	return ""
}

// checkNodeParams refuses what Ironic refuses: unknown parameters (400) and
// those of a later microversion than v (406).
func checkNodeParams(q url.Values, v version) error {
	for name := range q {
		f, ok := nodeListParams[name]
		switch {
		case !ok:
			return errorf(http.StatusBadRequest, "Unknown argument: %q", name)
		case !v.atLeast(f.since):
			return errorf(http.StatusNotAcceptable, "The %q parameter needs API version %s or later; this request is at %s", name, f.since, v)
		case f.match != nil:
			// A value is checked even when no node is there to match it.
			if _, err := f.match(nodeRow{n: &nodusv1.Node{}}, q.Get(name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// matchNode says whether a node passes every filter of q. A node's row
// becomes a row only for a filter to read: most lists have none.
func matchNode[R row](q url.Values, node R) (bool, error) {
	for name, values := range q {
		if f := nodeListParams[name]; f.match != nil {
			ok, err := f.match(node, values[0])
			if err != nil || !ok {
				return false, err
			}
		}
	}
	return true, nil
}
