package reservedhost

import (
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// ETag is the strong entity tag of an object's current version: its
// resourceVersion, quoted. It is the same for every media type of the object.
func ETag(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return `"` + m.GetResourceVersion() + `"`
}

var errMalformedIfMatch = errors.New("If-Match must be * or a comma-separated list of quoted entity tags")

// IfMatch evaluates an If-Match header (RFC 9110 §13.1.1) against the current
// strong tag of an existing object: "*" matches; otherwise one listed tag
// must equal current by strong comparison, so weak tags (W/"…") never match.
func IfMatch(header, current string) (bool, error) {
	header = strings.TrimSpace(header)
	if header == "*" {
		return true, nil
	}
	matched := false
	for _, tag := range strings.Split(header, ",") {
		tag = strings.TrimSpace(tag)
		weak := strings.HasPrefix(tag, "W/")
		opaque := strings.TrimPrefix(tag, "W/")
		if len(opaque) < 2 || opaque[0] != '"' || opaque[len(opaque)-1] != '"' || strings.Contains(opaque[1:len(opaque)-1], `"`) {
			return false, errMalformedIfMatch
		}
		if !weak && opaque == current {
			matched = true
		}
	}
	return matched, nil
}
