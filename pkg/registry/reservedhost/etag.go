package reservedhost

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodus-dev/nodus/pkg/apierror"
	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/exchange"
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

// checkIfMatch applies the request's If-Match, if any, to host: 400 when
// malformed, 412 PreconditionFailed when it names another version.
func checkIfMatch(ctx context.Context, host *nodusv1.ReservedHost) error {
	ifMatch := strings.Join(exchange.From(ctx).RequestHeaderValues("If-Match"), ",")
	if ifMatch == "" {
		return nil
	}
	match, err := IfMatch(ifMatch, ETag(host))
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if !match {
		return apierror.New(ctx, apierror.ReasonPreconditionFailed, nodusv1.Resource("reservedhosts"), host.Name,
			fmt.Sprintf("If-Match %s does not name the current version %s of reservedhost %q", ifMatch, ETag(host), host.Name), "")
	}
	return nil
}
