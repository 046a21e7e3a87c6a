package server

import (
	"net/http/httptest"
	"testing"
)

// Watches and heartbeat streams are told by their URL before the generic
// chain resolves them; everything else is grown as before.
func TestLongRunningRequestsAreToldByTheirURL(t *testing.T) {
	for url, want := range map[string]bool{
		"/apis/nodus.dev/v1/reservations?watch=true&fieldSelector=status.node%3Dn1": true,
		"/apis/nodus.dev/v1/reservations?fieldSelector=status.node%3Dn1&watch=1":    true,
		"/apis/nodus.dev/v1/watch/nodes/n1":                                         true,
		"/apis/nodus.dev/v1/nodes/n1/heartbeatstream":                               true,
		"/apis/nodus.dev/v1/reservations?watch=false":                               false,
		"/apis/nodus.dev/v1/reservations?allowWatchBookmarks=true":                  false,
		"/apis/nodus.dev/v1/reservations?labelSelector=watch%3Dtrue":                false,
		"/apis/nodus.dev/v1/nodes/n1/heartbeat":                                     false,
		"/apis/nodus.dev/v1/projects/p/reservedhosts/h":                             false,
	} {
		if got := longRunningByURL(httptest.NewRequest("GET", url, nil)); got != want {
			t.Errorf("%s: long-running %v, want %v", url, got, want)
		}
	}
}
