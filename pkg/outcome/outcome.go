// Package outcome tells a write that did not happen from one whose outcome
// is unknown, and a refusal final for its request from an answer that a
// retry may change. A write can land in etcd and its answer still be lost: etcd's
// leader changed under it, the request timed out, the replica serving it
// died. Code that undoes what it prepared for a write (a claim, a lock)
// must undo it only when the write surely did not happen, or the write it
// prepared for stands without it.
package outcome

import (
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Refused says whether err proves that the write it answers did not happen:
// the server refused it with a 4xx status (a conflict, an invalid object, a
// missing one, a denial, too many requests), which it answers before it
// writes. A 408, any 5xx, a broken connection, a timeout or a cancelled
// context may come after the write landed.
func Refused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout
}

// Final says whether err is a refusal the same request would get again:
// a 4xx other than 408 (the request took too long) and 429 (the server
// asked to slow down). Anything else (a 5xx, a broken connection, a
// timeout) may pass when sent again.
func Final(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}
